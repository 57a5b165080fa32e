"""A throwaway PostgreSQL server for the tests of ``grade --db`` (Debian's ``postgresql``
package: ``apt-get install -y postgresql``).

The server listens on a Unix socket only, in a folder of its own under /tmp (never on the
network), trusts its one user, and is stopped and deleted at the end. PostgreSQL refuses
to run as root: under root it runs as the ``postgres`` user the Debian package creates.
"""

import glob
import os
import shutil
import subprocess
import tempfile
from contextlib import contextmanager
from pathlib import Path

import pytest

MISSING = (
    "PostgreSQL's server programs (initdb, pg_ctl) are not installed: "
    "`apt-get update && apt-get install -y postgresql`"
)
USER = "grader"


def _program(name: str) -> str | None:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return found[-1] if found else shutil.which(name)


def require_postgres() -> tuple[str, str]:
    """(initdb, pg_ctl); skips without them, except under CI (CI=true), where it fails."""
    initdb, pg_ctl = _program("initdb"), _program("pg_ctl")
    if initdb is None or pg_ctl is None:
        if os.environ.get("CI") == "true":
            pytest.fail(MISSING)
        pytest.skip(MISSING)
    return initdb, pg_ctl


def _as_server_user(command: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return command
    return ["runuser", "-u", "postgres", "--", *command]


@contextmanager
def postgres_server(database: str = "gradebook"):
    """Start a server with an empty ``database``; yields its URL (``postgresql://`` on the
    socket, no password)."""
    initdb, pg_ctl = require_postgres()
    folder = Path(tempfile.mkdtemp(prefix="course-postgres-"))
    folder.chmod(0o755)
    data, socket = folder / "data", folder / "socket"
    socket.mkdir()
    if os.geteuid() == 0:
        shutil.chown(folder, "postgres")
        shutil.chown(socket, "postgres")

    def run(command):
        result = subprocess.run(
            _as_server_user(command), capture_output=True, text=True, timeout=120
        )
        assert result.returncode == 0, f"{command[0]}: {result.stdout}{result.stderr}"

    try:
        run([initdb, "-D", str(data), "-U", USER, "-A", "trust", "--no-sync", "-E", "UTF8"])
        options = f"-k {socket} -c listen_addresses='' -c fsync=off -c max_connections=50"
        run([pg_ctl, "-D", str(data), "-o", options, "-l", str(folder / "log"), "-w", "start"])
        try:
            import psycopg

            with psycopg.connect(host=str(socket), user=USER, dbname="postgres") as admin:
                admin.autocommit = True
                admin.execute(f'CREATE DATABASE "{database}"')
            yield f"postgresql://{USER}@/{database}?host={socket}"
        finally:
            run([pg_ctl, "-D", str(data), "-m", "fast", "-w", "stop"])
    finally:
        shutil.rmtree(folder, ignore_errors=True)
