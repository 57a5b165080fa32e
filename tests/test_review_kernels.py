"""The kernels ``review`` lets JupyterLab start run in the grading sandbox, with the
environment from the allowlist (``autograder/review_kernels.py``): a submission run there
by the instructor finds no secret of the server's (the gradebook's URL with its password),
no chapter's grading material, and not OUT."""

import asyncio
import json

from bwrap import require_bwrap
from traitlets.config import Config

from autograder.chapters import INSTALLED_ROOT
from autograder.formgrader import GRADEBOOK_ENV, REVIEW_KERNELS, Server
from autograder.outfolder import Out

SECRET = "review-secret-password"

PROBE = """
import json, os
course = {root!r}
print(json.dumps({{
    "environ": dict(os.environ),
    "course": sorted(os.listdir(course)),
    "out": os.listdir({out!r}),
    "home": os.path.expanduser("~"),
}}))
"""


async def _run(km, code: str) -> str:
    await km.start_kernel()
    client = km.client()
    client.start_channels()
    try:
        await client.wait_for_ready(timeout=120)
        msg_id = client.execute(code)
        printed = []
        while True:
            message = await client.get_iopub_msg(timeout=60)
            if message["parent_header"].get("msg_id") != msg_id:
                continue
            if message["msg_type"] == "stream":
                printed.append(message["content"]["text"])
            elif message["msg_type"] == "error":
                raise AssertionError(message["content"]["evalue"])
            elif message["msg_type"] == "status":
                if message["content"]["execution_state"] == "idle":
                    return "".join(printed)
    finally:
        client.stop_channels()
        await km.shutdown_kernel(now=True)


def test_the_review_server_starts_its_kernels_in_the_sandbox(tmp_path):
    command = Server(Out(tmp_path / "out"), "sqlite:///x.db", port=1).command()
    assert f"--MappingKernelManager.kernel_manager_class={REVIEW_KERNELS}" in command
    assert f"--SandboxedKernelManager.hidden={tmp_path / 'out'}" in command


def test_a_kernel_started_in_review_sees_no_secret_no_chapter_and_not_out(tmp_path, monkeypatch):
    require_bwrap()
    from autograder.review_kernels import ReviewKernelManager

    out = tmp_path / "out"
    (out / "nbgrader").mkdir(parents=True)
    (out / "gradebook.db").write_text("the hidden tests")
    monkeypatch.setenv(GRADEBOOK_ENV, f"postgresql://grader:{SECRET}@localhost/course")
    monkeypatch.setenv("PGPASSWORD", SECRET)
    config = Config()
    config.SandboxedKernelManager.hidden = [str(out)]
    km = ReviewKernelManager(config=config, kernel_name="python3")
    seen = json.loads(asyncio.run(_run(km, PROBE.format(root=str(INSTALLED_ROOT), out=str(out)))))
    assert SECRET not in json.dumps(seen["environ"])
    assert seen["home"] == "/tmp" and seen["out"] == []
    assert "solutions" not in seen["course"] and "tests" not in seen["course"]
    assert {"attention_course", "autograder"} <= set(seen["course"])
