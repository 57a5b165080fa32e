"""The student library: data, vocabulary and batching, training loop, checks, plots."""

from pathlib import Path

import matplotlib
import pytest
import torch

from attention_course import budget, grading_mode, set_seed
from attention_course.checks import (
    check_close,
    check_masked_out,
    check_rows_sum_to_one,
    check_shape,
    check_tensor,
)
from attention_course.data import Vocab, make_batch, number_pairs, number_words, toy_task
from attention_course.data.numbers import english_value, numbers_of
from attention_course.plots import attention_heatmap, plot_history
from attention_course.training import train

matplotlib.use("Agg")


def test_vocab_round_trip_and_specials():
    v = Vocab.build([["b", "a"], ["c"]])
    assert v.itos[:4] == ["<pad>", "<bos>", "<eos>", "<unk>"] and len(v) == 7
    assert v.decode(v.encode(["a", "c"], bos=True, eos=True)) == ["a", "c"]
    assert v.encode(["zzz"]) == [v.unk_id]
    assert v.decode([v.stoi["a"], v.eos_id, v.stoi["b"]]) == ["a"]  # stops at <eos>
    with pytest.raises(ValueError, match="outside the vocabulary"):
        v.decode([99])


def test_make_batch_frames_and_pads():
    src_v, tgt_v = Vocab.build([["x", "y", "z"]]), Vocab.build([["p", "q"]])
    batch = make_batch([(["x"], ["p", "q"]), (["x", "y", "z"], ["q"])], src_v, tgt_v)
    assert batch.src.shape == (2, 3) and batch.src_lengths.tolist() == [1, 3]
    assert batch.src[0, 1:].tolist() == [0, 0]
    assert tgt_v.decode(batch.tgt_out[0]) == ["p", "q"] and batch.tgt_out[0, -1] == tgt_v.eos_id
    assert batch.tgt_in[:, 0].tolist() == [tgt_v.bos_id] * 2
    assert batch.tgt_in[1].tolist() == [tgt_v.bos_id, tgt_v.stoi["q"], 0]  # no <eos> fed as input
    reversed_batch = make_batch([(["x", "y"], ["p"])], src_v, tgt_v, reverse_source=True)
    assert src_v.decode(reversed_batch.src[0]) == ["y", "x"]
    with pytest.raises(ValueError):
        make_batch([], src_v, tgt_v)


def test_number_words():
    assert number_words(97, "en") == ["ninety", "seven"]
    assert number_words(21, "de") == ["ein", "und", "zwanzig"]
    assert number_words(97, "fr") == ["quatre", "vingt", "dix", "sept"]
    for n in (0, 7, 13, 100, 1001, 123456789, 10**9 + 7):
        assert english_value(number_words(n, "en")) == n
        assert "".join(number_words(n, "de"))  # splits without error
    with pytest.raises(ValueError):
        number_words(-1)
    with pytest.raises(ValueError):
        number_words(5, "xx")


def test_number_pairs_are_distinct_bounded_and_splittable():
    train_pairs = number_pairs(300, "fr", max_digits=6, seed=0, max_src_len=8)
    assert len({tuple(s) for s, _ in train_pairs}) == 300
    assert all(len(s) <= 8 for s, _ in train_pairs)
    test_pairs = number_pairs(50, "fr", max_digits=6, seed=1, exclude=numbers_of(train_pairs))
    assert not numbers_of(test_pairs) & numbers_of(train_pairs)
    with pytest.raises(ValueError, match="could only make"):
        number_pairs(50, "de", max_digits=1)


@pytest.mark.parametrize("task", ["copy", "reverse", "sort"])
def test_toy_tasks(task):
    x, y = toy_task(task, 5, length=6, vocab_size=4, generator=torch.Generator().manual_seed(0))
    assert x.shape == y.shape == (5, 6)
    expected = {"copy": x, "reverse": x.flip(-1), "sort": x.sort(-1).values}[task]
    assert torch.equal(y, expected)


def test_toy_task_rejects_bad_arguments():
    with pytest.raises(ValueError, match="unknown task"):
        toy_task("shuffle", 3)


def test_set_seed_makes_runs_repeatable():
    set_seed(3)
    a = torch.randn(4)
    set_seed(3)
    assert torch.equal(a, torch.randn(4))


def test_grading_mode_and_budget(monkeypatch):
    monkeypatch.delenv("ATTENTION_COURSE_GRADING", raising=False)
    assert not grading_mode() and budget(60, 5) == 60
    monkeypatch.setenv("ATTENTION_COURSE_GRADING", "1")
    assert grading_mode() and budget(60, 5) == 5


def test_train_learns_and_respects_max_steps():
    set_seed(0)
    model = torch.nn.Linear(3, 1)
    w = torch.tensor([[1.0, -2.0, 0.5]])

    def next_batch(step):
        x = torch.randn(32, 3)
        return x, x @ w.T

    def loss_fn(m, batch):
        x, y = batch
        return torch.nn.functional.mse_loss(m(x), y)

    history = train(
        model,
        next_batch,
        loss_fn,
        seconds=30,
        max_steps=300,
        lr=0.05,
        evaluate=lambda m: {"error": (m.weight - w).abs().max().item()},
        eval_every=100,
        progress=False,
    )
    assert len(history.steps) == 300 and history.eval_steps == [100, 200, 300]
    assert history.last("error") < 0.05 and history.losses[-1] < history.losses[0]


def test_train_stops_once_its_loss_is_below_stop_below(capsys):
    """With ``stop_below``, training ends at the first step whose last CONVERGED_OVER losses
    average below it; that is not the clock's stop, and nothing is printed."""
    from attention_course.training import CONVERGED_OVER

    set_seed(0)
    losses = iter([1.0] * 60 + [0.001] * 1000)
    history = train(
        torch.nn.Linear(1, 1),
        lambda s: torch.randn(4, 1),
        lambda m, b: m(b).pow(2).mean() * 0 + next(losses),
        seconds=30,
        max_steps=500,
        progress=False,
        stop_below=0.02,
    )
    # the mean of the last 50 falls below 0.02 once at most 0.98 / 0.999 of them are 1.0
    assert history.converged and not history.stopped_by_clock
    assert sum(history.losses[-CONVERGED_OVER:]) / CONVERGED_OVER < 0.02
    assert sum(history.losses[-CONVERGED_OVER - 1 : -1]) / CONVERGED_OVER >= 0.02
    assert len(history.steps) < 500 and capsys.readouterr().out == ""


def test_train_stops_at_its_time_budget_and_says_so(capsys):
    model = torch.nn.Linear(1, 1)
    history = train(
        model,
        lambda s: torch.randn(4, 1),
        lambda m, b: m(b).pow(2).mean(),
        seconds=0.2,
        max_steps=10**9,
        progress=False,
    )
    assert history.seconds >= 0.2  # it ran until its budget was spent, not before
    # a result of fewer steps than asked for is never read as the full training's
    done = len(history.steps)
    assert history.stopped_by_clock and history.max_steps == 10**9
    assert history.steps_done() == f"{done:,} of {10**9:,} steps (stopped by the time limit)"
    said = capsys.readouterr().out
    assert f"Training stopped at its time limit of 0.2 s after {done:,} of" in said


def test_train_bounded_by_its_steps_says_nothing(capsys):
    history = train(
        torch.nn.Linear(1, 1),
        lambda s: torch.randn(4, 1),
        lambda m, b: m(b).pow(2).mean(),
        seconds=60,
        max_steps=5,
        progress=False,
    )
    assert not history.stopped_by_clock and history.steps_done() == "5 steps"
    assert "time limit" not in capsys.readouterr().out


def test_progress_bar_redraws_rarely(capsys):
    """A redraw per step floods a notebook's output channel (the kernel then drops
    messages, and nbval or the grader waits for them in vain)."""
    model = torch.nn.Linear(1, 1)
    train(
        model,
        lambda s: torch.randn(4, 1),
        lambda m, b: m(b).pow(2).mean(),
        seconds=60,
        max_steps=2000,
        progress=True,
    )
    redraws = capsys.readouterr().err.count("\r")
    assert 0 < redraws < 100, f"{redraws} progress-bar redraws for 2000 fast steps"


def test_train_reports_a_diverging_loss():
    model = torch.nn.Linear(1, 1)
    with pytest.raises(FloatingPointError, match="loss became"):
        train(
            model,
            lambda s: None,
            lambda m, b: m.weight.sum() * float("nan"),
            seconds=5,
            max_steps=3,
            progress=False,
        )


def test_checks_say_what_they_saw_and_expected():
    with pytest.raises(
        AssertionError, match=r"shape \(2, 5, 8\), expected \(2, 3, 8\) = \(b, q, d\).*\n.*did you"
    ):
        check_shape(torch.zeros(2, 5, 8), (2, 3, 8), "output", "(b, q, d)", hint="did you?")
    with pytest.raises(AssertionError, match="saw 1, expected 0"):
        check_close(torch.tensor([0.0, 1.0]), torch.tensor([0.0, 0.0]))
    with pytest.raises(AssertionError, match="expected a torch.Tensor"):
        check_tensor(None)
    with pytest.raises(AssertionError, match="sum to"):
        check_rows_sum_to_one(torch.full((2, 3), 0.5))
    with pytest.raises(AssertionError, match="mask forbids"):
        check_masked_out(torch.full((1, 2), 0.5), torch.tensor([True, False]))
    check_close(torch.tensor([1.0]), torch.tensor([1.0 + 1e-7]))  # tolerances, not equality


def test_plots_return_figures():
    fig = attention_heatmap(torch.rand(3, 4).softmax(-1), ["a", "b", "c"], list("wxyz"), title="t")
    assert fig.axes
    with pytest.raises(ValueError, match="labels"):
        attention_heatmap(torch.rand(3, 4), ["a"], None)
    with pytest.raises(ValueError, match="2-D"):
        attention_heatmap(torch.rand(2, 3, 4))
    model = torch.nn.Linear(1, 1)
    history = train(
        model,
        lambda s: torch.randn(4, 1),
        lambda m, b: m(b).pow(2).mean(),
        seconds=5,
        max_steps=5,
        evaluate=lambda m: {"x": 1.0},
        eval_every=2,
        progress=False,
    )
    assert plot_history(history).axes


def _decoding_examples():
    g = torch.Generator().manual_seed(0)
    short = (["twenty", "one"], ["ein", "und", "zwanzig", "<eos>"], torch.rand(4, 2, generator=g))
    long = (list("abcde"), ["x"] * 7, torch.rand(7, 5, generator=g).softmax(-1))
    return {"short": short, "long": long}


def test_draw_decoding_step_shows_one_row_and_the_output_so_far():
    import matplotlib.pyplot as plt

    from attention_course.widgets import draw_decoding_step

    source, output, weights = _decoding_examples()["short"]
    fig = draw_decoding_step(source, output, weights, step=2, title="21")
    bars, heatmap, text = fig.axes[:3]
    heights = [patch.get_height() for patch in bars.patches]
    assert heights == pytest.approx(weights[2].tolist())
    assert [t.get_text() for t in bars.get_xticklabels()] == source
    assert [t.get_text() for t in heatmap.get_yticklabels()] == output
    written = [t.get_text() for t in text.texts]
    assert written == ["ein", "und", "zwanzig"]  # the output so far, not the future
    assert text.texts[-1].get_bbox_patch() is not None  # the current token is highlighted
    assert text.texts[0].get_bbox_patch() is None
    with pytest.raises(ValueError, match="outside the 4 decoder steps"):
        draw_decoding_step(source, output, weights, step=4)
    plt.close("all")


def test_explore_decoding_validates_its_examples():
    from attention_course.widgets import explore_decoding

    source, output, weights = _decoding_examples()["short"]
    with pytest.raises(ValueError, match=r"shape \(2, 4\), expected \(4, 2\).*transposed"):
        explore_decoding({"t": (source, output, weights.T)})
    with pytest.raises(ValueError, match=r"shape \(3, 2\), expected \(4, 2\)"):
        explore_decoding({"t": (source, output, weights[:3])})
    with pytest.raises(ValueError, match=r"expected \(4, 2\)"):
        explore_decoding({"t": (source, output, weights[None])})
    with pytest.raises(ValueError, match="triple"):
        explore_decoding({"t": (source, output)})
    with pytest.raises(ValueError, match="token lists, not strings"):
        explore_decoding({"t": ("twenty one", output, weights)})
    with pytest.raises(ValueError, match="non-empty dict"):
        explore_decoding({})
    with pytest.raises(ValueError, match="non-empty dict"):
        explore_decoding([(source, output, weights)])


def test_explore_decoding_draws_once_and_follows_the_menu(monkeypatch):
    import ipywidgets
    import matplotlib.pyplot as plt

    import attention_course.widgets as widgets_module

    shown, drawn = [], []
    monkeypatch.setattr(widgets_module, "display", shown.append)
    original = widgets_module.draw_decoding_step

    def spy(source, output, weights, step, title=""):
        drawn.append((title, step))
        return original(source, output, weights, step, title)

    monkeypatch.setattr(widgets_module, "draw_decoding_step", spy)
    plt.close("all")
    widgets_module.explore_decoding(_decoding_examples())
    assert len(shown) == 1 and drawn == [("short", 0)]  # drawn once without a browser
    assert plt.get_fignums(), "no figure was drawn"
    controls = {type(w): w for w in shown[0].children}
    menu, slider = controls[ipywidgets.Dropdown], controls[ipywidgets.IntSlider]
    assert list(menu.options) == ["short", "long"] and slider.max == 3
    menu.value = "long"
    assert slider.max == 6 and drawn[-1] == ("long", 0)
    slider.value = 6
    assert drawn[-1] == ("long", 6)
    menu.value = "short"  # fewer steps: the slider comes back within range
    assert slider.max == 3 and slider.value == 3 and drawn[-1] == ("short", 3)
    plt.close("all")


# ---------------------------------------------------------------------------------------
# Explorers: one Explorer drives the notebook's widget and the website's pre-rendered frames


def _page_data(page_html: str) -> dict:
    """The JSON that an explorer's HTML carries for its script."""
    import json
    import re

    found = re.search(r'<script type="application/json" class="ac-data">(.*?)</script>', page_html)
    assert found, "no frame data in the explorer's HTML"
    return json.loads(found.group(1).replace("<\\/", "</"))


def test_explorer_html_has_a_frame_for_every_combination_that_exists():
    import base64
    import re

    import matplotlib.pyplot as plt

    from attention_course.explorer import Control, Explorer

    drawn = []

    def draw(colour: str, size: int):
        drawn.append((colour, size))
        fig, ax = plt.subplots(figsize=(2, 2))
        ax.bar([0], [size], color=colour)
        ax.set_ylim(0, 3)
        return fig

    explorer = Explorer(
        draw,
        [
            Control("colour", [("blue", "C0"), ("orange", "C1")], kind="buttons"),
            Control("size", [(str(i), i) for i in range(3)], value=1),
        ],
        available=lambda v: v["colour"] == "C0" or v["size"] < 2,  # orange stops at size 1
        alt="a bar",
    )
    page = explorer.html()
    data = _page_data(page)
    assert sorted(data["keys"]) == ["0,0", "0,1", "0,2", "1,0", "1,1"]
    assert len(drawn) == 5 and ("C1", 2) not in drawn
    # a bar of height 0 looks the same in both colours: that picture is stored once
    assert data["keys"]["0,0"] == data["keys"]["1,0"] and len(data["images"]) == 4
    assert data["start"] == [0, 1]  # the controls' initial values
    first = data["keys"]["0,1"]
    assert data["images"][first] is None  # stored once, as the <img>'s own src
    src = re.search(r'<img class="ac-frame" src="data:image/png;base64,([^"]+)"', page).group(1)
    assert base64.b64decode(src).startswith(b"\x89PNG")
    assert 'alt="a bar: colour blue, size 1"' in page
    assert page.count('type="range"') == 1 and page.count("<button") == 2
    assert 'aria-pressed="true">blue</button>' in page
    assert "http" not in page  # nothing to load from anywhere
    plt.close("all")


def test_explorer_widget_draws_what_the_page_shows(monkeypatch):
    """The ipywidgets version and the website's frames come from the same draw()."""
    import ipywidgets
    import matplotlib.pyplot as plt

    from attention_course import explorer as explorer_module
    from attention_course.widgets import heads_explorer

    weights = torch.rand(3, 4, 5, generator=torch.Generator().manual_seed(0)).softmax(-1)
    explorer = heads_explorer(weights, list("abcd"), list("vwxyz"), title="head")
    data = _page_data(explorer.html())
    assert sorted(data["keys"]) == ["0", "1", "2"] and data["controls"][0]["kind"] == "buttons"

    shown = []
    monkeypatch.setattr(plt, "show", lambda: shown.append(explorer_module._png(plt.gcf())))
    widget = explorer.widget()
    (toggle,) = [w for w in widget.children if isinstance(w, ipywidgets.ToggleButtons)]
    toggle.value = 2
    frame = explorer_module._png(explorer.draw(head=2))
    assert shown[-1] == frame
    assert data["images"][data["keys"]["2"]] == explorer_module._b64(frame)
    plt.close("all")


def test_explorer_controls_are_checked():
    from attention_course.explorer import Control, Explorer

    with pytest.raises(ValueError, match="no options"):
        Control("x", [])
    with pytest.raises(ValueError, match="kind 'wheel'"):
        Control("x", [("a", 1)], kind="wheel")
    with pytest.raises(ValueError, match="5 is not one of its options"):
        Control("x", [("a", 1)], on_page=[5])
    with pytest.raises(ValueError, match="distinct names"):
        Explorer(lambda x: None, [Control("x", [("a", 1)]), Control("x", [("b", 2)])])


def test_every_explorer_has_a_static_version(monkeypatch):
    import matplotlib.pyplot as plt

    import attention_course.widgets as widgets_module
    from autograder.reference.spatial import affine_grid, bilinear_sample, undo_distortion

    shown = []
    monkeypatch.setattr(widgets_module, "display", shown.append)
    widgets_module.explore_decoding(_decoding_examples(), static=True)
    data = _page_data(shown[-1].data)
    # one frame per decoder step of each example: 4 for "short", 7 for "long"
    assert sorted(data["keys"]) == sorted(
        [f"0,{i}" for i in range(4)] + [f"1,{i}" for i in range(7)]
    )
    assert data["controls"][0]["labels"] == ["short", "long"]

    widgets_module.explore_attention(torch.rand(3, 4).softmax(-1), static=True)
    assert len(_page_data(shown[-1].data)["keys"]) == 3

    attention = {
        "encoder": [torch.rand(1, 2, 3, 3)] * 2,
        "decoder": [torch.rand(1, 2, 4, 4)] * 2,
        "cross": [torch.rand(1, 2, 4, 3)] * 2,
    }
    widgets_module.explore_transformer_attention(attention, list("abc"), list("wxyz"), static=True)
    data = _page_data(shown[-1].data)
    assert len(data["keys"]) == 3 * 2 * 2 and data["start"] == [2, 1, 0]  # cross, last layer

    explorer = widgets_module.sampling_explorer(
        affine_grid,
        bilinear_sample,
        undo_distortion,
        torch.rand(8, 8),
        out_size=8,
        on_page={"degrees": [0.0, 90.0], "scale": [1.0]},
    )
    page = explorer.html()
    data = _page_data(page)
    assert sorted(data["keys"]) == ["0,0,0,0", "1,0,0,0"]
    assert "On this page: scale 1, shift x 0, shift y 0" in page  # the sliders not drawn
    assert page.count('type="range"') == 1
    plt.close("all")


def test_a_nan_without_a_hint_does_not_blame_a_softmax():
    """Issue 36: chapter 09's rollout and distances have no softmax, and a NaN in them was
    explained by one. Without a hint of the test's own, the message names every usual
    source of a NaN."""
    from attention_course.checks import check_close

    with pytest.raises(AssertionError) as failed:
        check_close(torch.tensor([1.0, float("nan")]), torch.tensor([1.0, 2.0]), "distances")
    message = str(failed.value)
    assert "contains NaN (first at index (1,))" in message
    assert "0 / 0" in message and "softmax" in message
    with pytest.raises(AssertionError) as failed:
        check_close(torch.tensor([float("nan")]), torch.tensor([2.0]), "x", hint="divide later")
    assert "divide later" in str(failed.value) and "softmax" not in str(failed.value)


def test_every_notebook_runs_on_one_thread():
    """Two threads on two cores, one of them busy with another program, ran chapter 03's
    notebook 25 times slower (issue 36: the times the notebooks promise hold under load)."""
    import nbformat

    from attention_course import use_one_thread
    from autograder.chapters import ALL_CHAPTERS, solution_path

    before = torch.get_num_threads()
    try:
        use_one_thread()
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
    root = Path(__file__).resolve().parents[1]
    for chapter in ALL_CHAPTERS:
        nb = nbformat.read(solution_path(root, chapter), as_version=4)
        setup = next(
            c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "setup"
        )
        assert "\nuse_one_thread()" in setup.source, chapter


def test_check_close_checks_the_dtype_an_expected_tensor_states():
    """Issue 59: check_close cast the expected value to the result's dtype, so a float32
    result passed a float64 check at 1e-9 where the text says the result has the input's
    dtype. An expected tensor states the dtype; a number or a list states none."""
    x64 = torch.tensor([1.0, 2.0], dtype=torch.float64)
    with pytest.raises(AssertionError) as failed:
        check_close(x64.float(), x64, "frequencies", hint="a hint about the values", atol=1e-12)
    message = str(failed.value)
    assert "frequencies has dtype torch.float32, expected torch.float64." in message
    assert "Likely cause:" in message and ".to(x.dtype)" in message
    assert "a hint about the values" not in message  # the cause is the dtype, not the values
    with pytest.raises(AssertionError, match="has dtype torch.float64, expected torch.float32"):
        check_close(x64, x64.float())
    check_close(x64, x64.float(), same_dtype=False)  # where the exercise leaves it open
    check_close(x64, [1.0, 2.0])  # a list states no dtype
    check_close(torch.tensor(0.5, dtype=torch.float64), 0.5)  # nor does a number
    check_close(x64, x64.clone())
    # integers: any integer dtype, but not floats; masks: bool
    check_close(torch.tensor([1, 2], dtype=torch.int32), torch.tensor([1, 2]))
    with pytest.raises(AssertionError, match="has dtype torch.float32, expected torch.int64"):
        check_close(torch.tensor([1.0, 2.0]), torch.tensor([1, 2]))
    with pytest.raises(AssertionError, match="has dtype torch.int64, expected torch.float32"):
        check_close(torch.tensor([1, 2]), torch.tensor([1.0, 2.0]))
    with pytest.raises(AssertionError, match="dtype torch.float32, expected torch.bool.*\n.*bool"):
        check_close(torch.tensor([1.0, 0.0]), torch.tensor([True, False]), "mask")
    check_close(torch.tensor([True, False]), torch.tensor([True, False]))
    # the shape is checked first, and the values still are
    with pytest.raises(AssertionError, match="has shape"):
        check_close(x64[:1].float(), x64)
    with pytest.raises(AssertionError, match="saw 3, expected 2"):
        check_close(x64 + torch.tensor([0.0, 1.0], dtype=torch.float64), x64)


# Chapter 10 run in-process, with edits to its solution cells (``tests/test_mistakes.py``'s
# runner: the set-up, the exercises and the graded test cells, in grading mode).
SINCE_2023 = "10_attention_since_2023"


def _run_chapter(root, chapter, edits, visible_only=False):
    """The failed graded cells of ``chapter`` with ``edits`` ({grade id: [(old, new)]}, each
    old text once in its cell) made, and the namespace the cells ran in."""
    from test_mistakes import _grading_mode, _run, cells_to_run

    cells = []
    for grade_id, graded, source, counts in cells_to_run(root, chapter):
        for old, new in edits.get(grade_id, []):
            assert source.count(old) == 1, (grade_id, old)
            source = source.replace(old, new)
        cells.append((grade_id, graded, source, counts))
    failed: dict[str, str] = {}
    namespace: dict = {"__name__": "__main__"}
    with _grading_mode():
        _run(cells, namespace, failed, visible_only=visible_only)
    return failed, namespace


IN_PLACE = {
    "stretching": [
        (
            "    stretched = theta / scale\n",
            "    theta /= scale  # the caller's theta\n    stretched = theta\n",
        ),
        (
            "    stretched = (1 - ramp) * theta / scale + ramp * theta\n",
            "    stretched = theta.mul_((1 - ramp) / scale + ramp)\n",
        ),
    ],
    "sinks": [
        (
            "    weights = torch.softmax(torch.cat([sink, scores], dim=-1), dim=-1)[..., 1:]\n",
            "    scores -= sink  # the caller's scores, shifted by the sink's logit\n"
            "    weights = torch.softmax(torch.cat([torch.zeros_like(sink), scores], dim=-1), "
            "dim=-1)[..., 1:]\n",
        )
    ],
    "linear_attention": [
        (
            "    similarity = feature_map(Q) @ feature_map(K).transpose(-2, -1)  # (..., T, T)\n",
            "    Q.copy_(feature_map(Q))  # the caller's queries\n"
            "    similarity = Q @ feature_map(K).transpose(-2, -1)  # (..., T, T)\n",
        )
    ],
}


@pytest.mark.parametrize("visible_only", [False, True], ids=["graded", "visible"])
def test_chapter_10_a_solution_that_changes_its_arguments_in_place_keeps_full_marks(
    root, visible_only
):
    """Issue 59: a right interpolated_frequencies that divided the caller's theta in place
    lost 3 points, because the visible test used theta again (and failed a bare assert). The
    tests hand each function copies of what they use again, so what a function does to its
    arguments changes nothing."""
    failed, _ = _run_chapter(root, SINCE_2023, IN_PLACE, visible_only)
    assert failed == {}, failed


# Answers that call what the test cells of the graded questions measure with
HELPERS = {
    "yarn_shortest_length": [
        (
            "    length = math.ceil(2 * math.pi * beta / theta)\n",
            "    length = next(L for L in range(2, 10**6) if kept_here(d, base, L, beta) >= num_kept)\n",
        )
    ],
    "absorbed_cheaper_from": [
        (
            "    length = max(num_new, num_new * d_head * d_latent // saved + 1)\n",
            "    dims = (d_model, num_heads, d_head, d_latent, d_rope)\n"
            "    length = next(T for T in range(num_new, 10**4) if counted_here(dims, num_new, T)"
            '["absorbed"] < counted_here(dims, num_new, T)["explicit"])\n',
        )
    ],
}


def test_chapter_10_graded_questions_cannot_call_the_tests_helpers(root):
    """Issue 59: chapter 10's graded questions once scored 2/2, unflagged, by calling the
    helpers that their test cells left in the kernel. The measurements live inside the test's
    check, which the cell deletes after use: an answer that calls them fails."""
    failed, namespace = _run_chapter(root, SINCE_2023, HELPERS)
    assert set(failed) == {"test_yarn_shortest_length", "test_absorbed_cheaper_from"}, failed
    assert all("NameError" in message for message in failed.values()), failed
    # and the solution's run leaves no function or class of a graded test cell behind
    failed, namespace = _run_chapter(root, SINCE_2023, {})
    assert failed == {}, failed
    test_cells = {g for g, graded, *_ in _cells(root, SINCE_2023) if graded}
    left = sorted(name for name, value in namespace.items() if _defined_in(value, test_cells))
    assert left == [], f"helpers of the test cells left in the kernel: {left}"


def _cells(root, chapter):
    from test_mistakes import cells_to_run

    return cells_to_run(root, chapter)


def _defined_in(value, cells) -> bool:
    """Whether ``value`` is a function, or a class with a method, that one of ``cells`` (grade
    ids, the file names the runner compiles the cells under) defined."""
    functions = vars(value).values() if isinstance(value, type) else [value]
    return any(
        getattr(getattr(f, "__code__", None), "co_filename", None) in cells for f in functions
    )


def test_no_check_of_a_test_cell_is_a_bare_assert():
    """Issue 59: no check in a test cell fails without saying what it saw and expected: every
    assert of every chapter's graded test cells has a message."""
    import ast

    import nbformat

    from autograder.chapters import ALL_CHAPTERS, solution_path

    root = Path(__file__).resolve().parents[1]
    bare = []
    for chapter in ALL_CHAPTERS:
        for cell in nbformat.read(solution_path(root, chapter), as_version=4).cells:
            meta = cell.metadata.get("nbgrader", {})
            if cell.cell_type != "code" or not meta.get("grade"):
                continue
            for node in ast.walk(ast.parse(cell.source)):
                if isinstance(node, ast.Assert) and node.msg is None:
                    bare.append(f"{chapter} {meta['grade_id']} line {node.lineno}")
    assert bare == [], bare


@pytest.mark.parametrize("visible_only", [False, True], ids=["graded", "visible"])
def test_chapter_10_frequencies_in_another_dtype_fail_with_the_dtype(root, visible_only):
    """Issue 59: the text says the frequencies have theta's shape and dtype (float64); a
    result in float32 passed every check. Now a visible check says so."""
    edits = {
        "stretching": [
            ("    stretched = theta / scale\n", "    stretched = theta.float() / scale\n")
        ]
    }
    failed, _ = _run_chapter(root, SINCE_2023, edits, visible_only)
    assert set(failed) == {"test_stretching"}, failed
    assert "has dtype torch.float32, expected torch.float64" in failed["test_stretching"]


# The same in the other chapters whose test cells measured through a helper that an answer
# could call: each answer below calls it, and now fails (the helper lives in the check).
OTHER_HELPERS = [
    (
        "02_bahdanau_attention",
        "scores_per_step",
        "    counts = (S, min(S, 2 * D + 1))\n",
        "    counts = counted_here(S, D)\n",
        "test_scores_per_step",
    ),
    (
        "04_dot_product_attention",
        "attention_outgrows_projections",
        "    n = d_model * (2 * d_k + d_v) // (d_k + d_v) + 1\n",
        "    n = next(n for n in range(1, 999) if counted_here(d_model, d_k, d_v, n)[1] > "
        "counted_here(d_model, d_k, d_v, n)[0])\n",
        "test_attention_outgrows_projections",
    ),
    (
        "08_language_models",
        "window_layers_to_reach",
        "    layers = math.ceil((context - 1) / (window - 1))\n",
        "    layers = next(k for k in range(1, context + 1) if field_here(k, window, context, 0) "
        "== context)\n",
        "test_window_layers_to_reach",
    ),
    (
        "03_convs2s",
        "dilated_layers_to_connect",
        "    layers = math.ceil(math.log2((n - 1) / (kernel_size - 1) + 1))\n",
        "    layers = 0\n    while first_seen(layers, n, kernel_size) > 0:\n        layers += 1\n",
        "test_dilated_layers_to_connect",
    ),
    (
        "08_language_models",
        "kv_cache_max_len",
        "    max_len = budget // per_position\n",
        "    max_len = 0\n"
        "    while cache_bytes(num_layers, batch, num_kv_heads, d_k, max_len + 1, dtype) <= budget:\n"
        "        max_len += 1\n",
        "test_kv_cache_max_len",
    ),
    (
        "09_vision_transformer",
        "smallest_patch_within",
        "        if num_layers * num_heads * tokens**2 <= budget:  # (1, h, T, T) a layer\n",
        "        if counted_here(image_size, patch_size, num_heads, num_layers) <= budget:\n",
        "test_smallest_patch_within",
    ),
]


@pytest.mark.parametrize("chapter, cell, old, new, test", OTHER_HELPERS, ids=lambda v: str(v)[:24])
def test_a_graded_answer_cannot_call_its_tests_measurement(root, chapter, cell, old, new, test):
    failed, _ = _run_chapter(root, chapter, {cell: [(old, new)]})
    assert set(failed) == {test}, failed
    assert "NameError" in failed[test], failed[test]


# ---------------------------------------------------------------------------------------
# The kit in Jupyter: progress bars and explorers a saved notebook keeps, the hand-in check
# from a cell, JupyterLab's terminal (tests/test_kit_in_jupyterlab.py runs them in Chromium)


def _drawn_bars(monkeypatch) -> list:
    """What ProgressBar draws in a notebook: the bundles of its display and its updates."""
    import IPython.core.display_functions as functions
    import IPython.display

    drawn = []

    def display(obj, raw=False, display_id=None, update=False, **kwargs):
        assert raw and isinstance(obj, dict)
        drawn.append(obj)
        return functions.DisplayHandle("bar") if display_id is True else None

    monkeypatch.setattr(IPython.display, "display", display)
    monkeypatch.setattr(functions, "display", display)
    return drawn


def test_the_notebooks_progress_bar_ends_on_what_was_done_as_plain_output(monkeypatch):
    from attention_course.training import ProgressBar

    drawn = _drawn_bars(monkeypatch)
    monkeypatch.setattr("attention_course.training._in_a_notebook", lambda: True)  # as in a kernel
    set_seed(0)
    train(
        torch.nn.Linear(2, 1),
        lambda s: torch.randn(8, 2),
        lambda m, x: m(x).pow(2).mean(),
        seconds=30,
        max_steps=120,
        progress=True,
    )
    assert set(drawn[-1]) == {"text/plain"}  # no widget, no markup: shown by any front end
    bar, line = drawn[-1]["text/plain"].split(" ", 1)
    assert bar == "\u2588" * 20 and line.startswith("training: 120 of 120 steps in ")
    assert line.endswith("(done)") and "last loss" in line
    assert len(drawn) < 10  # redrawn at most every half second, not at every step

    calls = iter(range(1000))

    def failing(m, x):
        if next(calls) == 30:
            raise ValueError("broken loss")
        return m(x).pow(2).mean()

    with pytest.raises(ValueError, match="broken loss"):
        train(torch.nn.Linear(2, 1), lambda s: torch.randn(8, 2), failing, seconds=30,
              max_steps=120, progress=True)  # fmt: skip
    bar, line = drawn[-1]["text/plain"].split(" ", 1)
    assert bar == "\u2588" * 5 + "\u2591" * 15  # 30 of 120 steps: a quarter
    assert line.startswith("training: 30 of 120 steps") and line.endswith("(stopped by ValueError)")

    bar = ProgressBar(10, notebook=True)
    bar.close(0, None, "stopped by KeyError")  # failed before its first step: no loss to show
    assert drawn[-1]["text/plain"].startswith("\u2591" * 20 + " training: 0 of 10 steps in ")
    assert "loss" not in drawn[-1]["text/plain"]


def test_the_text_bar_stays_with_the_steps_done_and_the_last_loss(capsys):
    set_seed(0)
    train(
        torch.nn.Linear(2, 1),
        lambda s: torch.randn(8, 2),
        lambda m, x: m(x).pow(2).mean(),
        seconds=0.3,
        max_steps=10**7,
        progress=True,
    )
    last = capsys.readouterr().err.replace("\r", "\n").strip().splitlines()[-1]
    assert "stopped by the time limit" in last and "last loss" in last and "/10000000" in last


def test_an_explorers_output_holds_a_still_of_its_view():
    import base64

    import matplotlib.pyplot as plt

    from attention_course.widgets import attention_explorer

    weights = torch.rand(3, 4, generator=torch.Generator().manual_seed(0)).softmax(-1)
    view = attention_explorer(weights, title="demo").widget()
    bundle = view._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle
    assert base64.b64decode(bundle["image/png"]).startswith(b"\x89PNG")
    assert (
        bundle["text/plain"].startswith("demo: the attention map")
        and "query 0" in bundle["text/plain"]
    )
    plt.close("all")


def test_the_hand_in_check_from_a_cell(tmp_path, monkeypatch, capsys):
    from attention_course import handin

    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError, match=r"check\('04_dot_product_attention.ipynb'\)"):
        handin.check("missing.ipynb")
    with pytest.raises(ValueError, match="cannot tell which notebook"):
        handin.check()
    notebook = tmp_path / "mine.ipynb"
    notebook.write_text("{}")
    monkeypatch.setenv("JPY_SESSION_NAME", str(notebook))  # what jupyter_server tells a kernel
    assert handin.this_notebook() == notebook

    ran = []

    class Process:
        def __init__(self, command, **kwargs):
            ran.append((command, kwargs["cwd"]))
            self.stdout = iter(["Visible tests: 1 of 1 pass (1 s in grading mode).\n", "READY\n"])

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    monkeypatch.setattr(handin.subprocess, "Popen", Process)
    monkeypatch.delenv("ATTENTION_COURSE_GRADING", raising=False)
    handin.check()
    import sys

    assert ran == [([sys.executable, "-m", "attention_course.validate", str(notebook)], tmp_path)]
    assert capsys.readouterr().out.rstrip().endswith("READY")
    monkeypatch.setenv("ATTENTION_COURSE_GRADING", "1")  # a cell a student added, graded
    handin.check()
    assert len(ran) == 1 and "does not run when grading" in capsys.readouterr().out


def test_jupyterlabs_terminal_finds_the_kits_commands(monkeypatch):
    import os
    import sys
    from types import SimpleNamespace

    from attention_course import lab

    folder = str(lab.scripts_folder())
    assert folder.startswith(sys.prefix)
    path = os.pathsep.join(["/usr/bin", folder, "/bin"])
    assert lab.path_with_scripts(path) == os.pathsep.join([folder, "/usr/bin", "/bin"])

    def server(settings, manager=None):
        log = SimpleNamespace(info=lambda *a: None)
        web_app = SimpleNamespace(settings={"terminal_manager": manager} if manager else {})
        return SimpleNamespace(terminado_settings=settings, web_app=web_app, log=log)

    monkeypatch.setenv("PATH", "/usr/bin")
    monkeypatch.setenv("SHELL", "/bin/zsh")
    settings = {}
    lab._load_jupyter_server_extension(server(settings))
    assert os.environ["PATH"] == os.pathsep.join([folder, "/usr/bin"])
    assert settings["shell_command"] == ["/bin/zsh"]  # not a login shell: PATH stays
    chosen = {"shell_command": ["/bin/fish", "-l"]}  # the instructor's or student's choice
    lab._load_jupyter_server_extension(server(chosen))
    assert chosen == {"shell_command": ["/bin/fish", "-l"]}
    manager = SimpleNamespace(shell_command=["/bin/zsh", "-l"])  # loaded after the terminals
    lab._load_jupyter_server_extension(server({}, manager))
    assert manager.shell_command == ["/bin/zsh"]
