"""The kit in the student's JupyterLab: a terminal there finds the kit's commands.

The kit's wheel turns this module on as a Jupyter server extension (a file it installs as
``<environment>/etc/jupyter/jupyter_server_config.d/attention_course.json``, see
``autograder/kit.py``), so it runs in every ``course/bin/jupyter lab`` and in no other
Jupyter. Started as ``course/bin/jupyter lab``, with the environment not activated,
JupyterLab's terminal does not have the environment's ``bin`` on its ``PATH``: ``python``
there is another Python, without the kit. This puts the environment's ``bin`` (``Scripts``
on Windows) first on the server's ``PATH``, which its terminals and kernels inherit, so
that ``course-validate NOTEBOOK`` and ``python -m attention_course.validate NOTEBOOK`` run
the kit's check there.

When the server has no terminal of its own (started from a desktop launcher or with its
output redirected), jupyter_server_terminals starts each terminal as a login shell, which
rebuilds ``PATH`` from ``/etc/profile`` and drops the environment's ``bin``; unless the
configuration names a shell itself (``ServerApp.terminado_settings``), this asks for the
same shell as an ordinary interactive one, which keeps the ``PATH`` it is given.

``course-validate`` is the name that works in any terminal where the environment's ``bin``
is on the ``PATH`` at all: a shell start-up file that puts another Python first (conda's
``base``) changes what ``python`` is, not what ``course-validate`` is.
"""

import os
import shutil
import sys
from pathlib import Path


def scripts_folder() -> Path:
    """The environment's folder of commands: ``bin``, or ``Scripts`` on Windows."""
    return Path(sys.prefix) / ("Scripts" if os.name == "nt" else "bin")


def path_with_scripts(path: str) -> str:
    """``path`` (a ``PATH``) with the environment's commands first, each folder once."""
    first = str(scripts_folder())
    rest = [
        p for p in path.split(os.pathsep) if p and os.path.normcase(p) != os.path.normcase(first)
    ]
    return os.pathsep.join([first, *rest])


def _jupyter_server_extension_points():
    return [{"module": "attention_course.lab"}]


def _load_jupyter_server_extension(serverapp) -> None:
    os.environ["PATH"] = path_with_scripts(os.environ.get("PATH", ""))
    if os.name == "nt":
        return
    settings = serverapp.terminado_settings
    if "shell_command" not in settings:
        # read by jupyter_server_terminals, which loads after this extension (extensions load
        # in the order of their names); a terminal manager already made is changed instead
        settings["shell_command"] = [os.environ.get("SHELL") or shutil.which("sh") or "sh"]
        web_app = getattr(serverapp, "web_app", None)
        manager = web_app.settings.get("terminal_manager") if web_app is not None else None
        if manager is not None:
            manager.shell_command = [part for part in manager.shell_command if part != "-l"]
    serverapp.log.info(
        "attention_course: terminals start with %s first on their PATH", scripts_folder()
    )
