"""The student kit in JupyterLab, the client students use, in Chromium.

The kit through chapter 04 is built and installed with pip into a fresh environment (its
console script and the Jupyter files it installs included) that reaches the course's
installed packages but not the repository; that environment's own ``jupyter lab`` is
started as a student starts it (not activated, no terminal of its own), and a notebook in
the kit's chapter folder is run in Chromium with Run All: a training run that ends, one that
fails, an explorer, and the hand-in check from a cell. Then the notebook is saved, its
kernel shut down and the notebook reopened, as a student opens it the next day. It checks
that

- each progress bar shows what was done: every step of the run that ended, the steps done
  and the error of the run that failed, with the last loss; and they are plain text, not
  widgets;
- nothing in the reopened notebook says "Loading widget": the explorer shows its saved
  controls and view, and its output holds a still of it for any other front end;
- the hand-in check runs from a cell (:func:`attention_course.handin.check`) and from
  JupyterLab's terminal (``course-validate``), with the kit's Python.
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
import urllib.error
import urllib.request
from pathlib import Path

import nbformat
import pytest
from browser import chromium, launch

from autograder import kit
from autograder.formgrader import free_port

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]
CHAPTER = "04_dot_product_attention"
TOKEN = "test-kit-in-jupyterlab"
# What the course's environment has that the kit's JupyterLab needs and pip would install
# there: the application's files, the widgets' extension and the server extensions it enables.
LAB_FILES = ("static", "schemas", "themes")
LAB_EXTENSIONS = ("@jupyter-widgets",)
SERVER_EXTENSIONS = ("jupyterlab.json", "jupyter_server_terminals.json")

CELLS = [
    # a run that ends: every step
    """import torch
from attention_course import set_seed
from attention_course.training import train

set_seed(0)
model = torch.nn.Linear(4, 1)
history = train(model, lambda step: torch.randn(16, 4), lambda m, x: m(x).pow(2).mean(),
                seconds=60, max_steps=300, progress=True)""",
    # a run that fails at step 40
    """def failing_loss(m, x):
    if len(failing_loss.calls) == 40:
        raise RuntimeError("a bug at step 40")
    failing_loss.calls.append(1)
    return m(x).pow(2).mean()

failing_loss.calls = []
try:
    train(model, lambda step: torch.randn(16, 4), failing_loss, seconds=60, max_steps=300,
          progress=True)
except RuntimeError as error:
    print("caught:", error)""",
    # an explorer
    """from attention_course.widgets import explore_attention

explore_attention(torch.rand(5, 6).softmax(-1), title="random")""",
    # the hand-in check, from a cell, of the chapter's notebook as it was handed out
    f"""from attention_course.handin import check

check("{CHAPTER}.ipynb")""",
]


def install_kit(built: dict, folder: Path) -> Path:
    """A fresh environment in ``folder`` with the kit's wheel installed by pip (its command
    and Jupyter files included) and the course's third-party packages reachable (a path in
    a .pth file), the repository not: returns its folder."""
    venv = folder / "course"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    (site / "course-packages.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--no-deps", "--no-index"]
        + ["--no-compile", "--disable-pip-version-check", str(built["wheel"])],
        check=True,
        cwd=folder,
    )
    # what installing jupyterlab there would have put beside it
    ours = Path(sys.prefix)
    lab = venv / "share" / "jupyter" / "lab"
    lab.mkdir(parents=True, exist_ok=True)
    for name in LAB_FILES:
        (lab / name).symlink_to(ours / "share" / "jupyter" / "lab" / name)
    extensions = venv / "share" / "jupyter" / "labextensions"
    extensions.mkdir(parents=True)
    for name in LAB_EXTENSIONS:
        (extensions / name).symlink_to(ours / "share" / "jupyter" / "labextensions" / name)
    config = venv / "etc" / "jupyter" / "jupyter_server_config.d"
    for name in SERVER_EXTENSIONS:
        shutil.copy(ours / "etc" / "jupyter" / "jupyter_server_config.d" / name, config)
    probe = subprocess.run(
        [str(python), "-c", "import attention_course, autograder"],
        capture_output=True,
        text=True,
        cwd=folder,
    )
    assert "No module named 'autograder'" in probe.stderr, probe.stderr
    return venv


def start_lab(venv: Path, kit_folder: Path, home: Path, log: Path) -> tuple:
    """``course/bin/jupyter lab notebooks/`` run from the kit's folder, with no terminal (its
    output to a file), its Jupyter folders in ``home``. Returns (process, base URL)."""
    port = free_port()
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("JUPYTER", "VIRTUAL_ENV", "IPYTHON", "PYTHON", "ATTENTION_COURSE"))
    }
    env.update(
        HOME=str(home),
        JUPYTER_CONFIG_DIR=str(home / "jupyter-config"),
        JUPYTER_DATA_DIR=str(home / "jupyter-data"),
        JUPYTER_RUNTIME_DIR=str(home / "jupyter-runtime"),
        JUPYTERLAB_SETTINGS_DIR=str(home / "lab-settings"),
        JUPYTERLAB_WORKSPACES_DIR=str(home / "lab-workspaces"),
        IPYTHONDIR=str(home / "ipython"),
        JUPYTER_TOKEN=TOKEN,
        SHELL="/bin/bash" if Path("/bin/bash").exists() else "/bin/sh",
    )
    # the PATH of a shell where the environment is not activated
    env["PATH"] = os.pathsep.join(
        p for p in env.get("PATH", "").split(os.pathsep) if Path(p) != Path(sys.prefix) / "bin"
    )
    with open(log, "w") as output:
        server = subprocess.Popen(
            [str(venv / "bin" / "python"), "-m", "jupyterlab", "notebooks/"]
            + ["--no-browser", "--ip=127.0.0.1", f"--port={port}"]
            + ["--LabApp.expose_app_in_browser=True", "--ServerApp.open_browser=False"]
            + (["--allow-root"] if os.geteuid() == 0 else []),
            cwd=kit_folder,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert server.poll() is None, f"jupyter lab stopped:\n{log.read_text()}"
        try:
            with urllib.request.urlopen(f"{base}/api/status?token={TOKEN}", timeout=2) as r:
                if r.status == 200:
                    return server, base
        except (urllib.error.URLError, OSError):
            time.sleep(0.3)
    raise AssertionError(f"jupyter lab did not answer in 60 s:\n{log.read_text()}")


def stop(server: subprocess.Popen) -> None:
    if server.poll() is None:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()


def api(base: str, method: str, path: str, body: dict | None = None) -> object:
    request = urllib.request.Request(
        f"{base}{path}?token={TOKEN}",
        method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        body = answer.read()
    return json.loads(body) if body else None


def wait_for(page, script: str, seconds: float, what: str, arg=None):
    """Poll ``script`` (a JS function of ``arg``) in the page until it returns a true value."""
    deadline = time.monotonic() + seconds
    while True:
        value = page.evaluate(script, arg)
        if value:
            return value
        if time.monotonic() > deadline:
            shown = page.evaluate(OUTPUTS)
            raise AssertionError(f"{what}: not after {seconds} s; the outputs: {shown}")
        time.sleep(0.25)


OPEN = """async (path) => {
  const widget = await window.jupyterapp.commands.execute('docmanager:open', {path});
  await widget.context.ready;
  await widget.sessionContext.ready;
  return true;
}"""
OUTPUTS = """() => Array.from(document.querySelectorAll('.jp-Notebook .jp-Cell'))
  .map(cell => Array.from(cell.querySelectorAll('.jp-OutputArea-output'))
  .map(o => o.innerText).join('\\n'))"""
TERMINAL = """async ([base, token, name, command]) => {
  const ws = new WebSocket(`${base.replace('http', 'ws')}/terminals/websocket/${name}?token=${token}`);
  let text = '';
  await new Promise((resolve, reject) => { ws.onopen = resolve; ws.onerror = reject; });
  const done = new Promise(resolve => {
    ws.onmessage = event => {
      const [kind, data] = JSON.parse(event.data);
      if (kind === 'stdout') text += data;
      if (/(^|\\n)(NOT )?READY/.test(text)) resolve();
    };
    setTimeout(resolve, 60000);
  });
  ws.send(JSON.stringify(['stdin', command + '\\r']));
  await done;
  ws.close();
  return text;
}"""


EXPLORER_SHOWN = """() => {
  const cells = document.querySelectorAll('.jp-Notebook .jp-Cell');
  const explorer = cells[2] && cells[2].querySelector('.jp-OutputArea');
  return !!explorer && !!explorer.querySelector('.widget-slider') && !!explorer.querySelector('img')
    && !/Loading widget/.test(document.querySelector('.jp-Notebook').innerText);
}"""


def run_in_jupyterlab(path: str, base: str, notebook: str) -> dict:
    """Run All in Chromium, save, shut the kernel down, reload and reopen the notebook, then
    the hand-in check in a terminal of that JupyterLab. Returns what each step showed."""
    from playwright.sync_api import sync_playwright

    seen = {}
    with sync_playwright() as playwright:
        browser = launch(playwright, path)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(f"{base}/lab?token={TOKEN}")
            page.wait_for_function("() => window.jupyterapp && window.jupyterapp.started")
            page.evaluate(OPEN, notebook)
            page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
            seen["ran"] = wait_for(
                page,
                f"() => {{ const outs = ({OUTPUTS})(); "
                "return /READY/.test(outs[outs.length - 1]) ? outs : null; }",
                60,
                "Run All did not end with the hand-in check's report",
            )
            page.evaluate("() => window.jupyterapp.commands.execute('docmanager:save')")
            wait_for(
                page,
                "() => !window.jupyterapp.shell.currentWidget.context.model.dirty",
                10,
                "the notebook was not saved",
            )
            for session in api(base, "GET", "/api/sessions"):  # its kernel, shut down
                api(base, "DELETE", f"/api/sessions/{session['id']}")
            page.reload()  # the next day: the notebook reopened, a new kernel
            page.wait_for_function("() => window.jupyterapp && window.jupyterapp.started")
            page.evaluate(OPEN, notebook)
            wait_for(page, EXPLORER_SHOWN, 20, "the reopened notebook did not show the explorer")
            seen["reopened"] = page.evaluate(OUTPUTS)
            seen["reopened text"] = page.evaluate(
                "() => document.querySelector('.jp-Notebook').innerText"
            )
            seen["page text"] = page.evaluate("() => document.body.innerText")

            # JupyterLab's terminal, opened in the notebook's folder as its launcher opens it
            terminal = api(base, "POST", "/api/terminals", {"cwd": str(Path(notebook).parent)})
            command = f"type python course-validate && course-validate {CHAPTER}.ipynb"
            seen["terminal"] = page.evaluate(TERMINAL, [base, TOKEN, terminal["name"], command])
        finally:
            browser.close()
    return seen


def test_a_notebook_of_the_kit_in_jupyterlab(tmp_path):
    path = chromium()
    built = kit.build(tmp_path / "kit", CHAPTER)
    venv = install_kit(built, tmp_path)
    trial = built["notebooks"] / CHAPTER / "trial.ipynb"
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in CELLS])
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nbformat.write(nb, trial)

    server, base = start_lab(venv, tmp_path / "kit", tmp_path / "home", tmp_path / "lab.log")
    try:
        seen = run_in_jupyterlab(path, base, f"{CHAPTER}/trial.ipynb")
    finally:
        stop(server)

    # the bars end on what was done, with the last loss
    ran = seen["ran"]
    done, failed = "\u2588" * 20, "\u2588" * 3 + "\u2591" * 17  # 300 of 300, 40 of 300 steps
    assert re.fullmatch(
        rf"{done} training: 300 of 300 steps in [\d.]+ s, last loss \S+ \(done\)", ran[0]
    )
    assert re.match(
        rf"{failed} training: 40 of 300 steps in [\d.]+ s, last loss \S+ "
        r"\(stopped by RuntimeError\)",
        ran[1],
    )
    assert "caught: a bug at step 40" in ran[1]
    # the hand-in check from a cell: the handed-out notebook, run as grading runs it
    assert "Visible tests: 0 of 8 pass" in ran[3] and "NOT READY" in ran[3], ran[3]

    saved = nbformat.read(trial, as_version=4)
    widget = "application/vnd.jupyter.widget-view+json"
    for cell in saved.cells[:2]:  # a bar is plain output, its last drawing
        (bar,) = [o for o in cell.outputs if o.output_type == "display_data"]
        assert set(bar.data) == {"text/plain"}  # no widget, no markup
    (explorer,) = saved.cells[2].outputs
    # the explorer: the widget, a still of its view for any other front end, its saved state
    assert set(explorer.data) == {widget, "image/png", "text/plain"}
    assert explorer.data["text/plain"].startswith("random: the attention map")
    assert explorer.data[widget]["model_id"] in json.dumps(saved.metadata["widgets"])

    # reopened, its kernel gone: the same bars, the explorer's controls and view, no widget
    # waiting for a kernel
    assert seen["reopened"][:2] == ran[:2]
    assert "Loading widget" not in seen["reopened text"]
    assert "Error displaying widget" not in seen["reopened text"]
    assert "official Jupyter news" not in seen["page text"]  # not offered: nothing fetched

    # JupyterLab's terminal finds the kit's python and its command, which runs the check
    said = seen["terminal"]
    bin_folder = str(venv / "bin")
    assert f"python is {bin_folder}/python" in said, said
    assert f"course-validate is {bin_folder}/course-validate" in said, said
    assert "Visible tests: 0 of 8 pass" in said and "NOT READY" in said, said
