"""The recorded reference of the student kit (``attention_course/recorded.py``): answers what
the release recorded, refuses what it did not, and says which release a notebook needs."""

import re
import tomllib
from pathlib import Path

import pytest
import torch
from torch import nn

import attention_course
from attention_course import recorded as R
from autograder.chapters import ALL_CHAPTERS, solution_path

ROOT = Path(__file__).resolve().parents[1]


class Tiny(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.W = nn.Linear(d, d, bias=False)
        self.d = d

    def forward(self, x):
        return self.W(x).tanh()


def noisy(x, generator):
    return x + torch.randn(x.shape, generator=generator)


@pytest.fixture
def book(monkeypatch):
    """A book recorded from a fake reference module, then replayed as the kit does."""
    real = type(
        "module",
        (),
        {"Tiny": Tiny, "noisy": staticmethod(noisy), "double": staticmethod(lambda x: 2 * x)},
    )
    book = R.Book("00_test")
    ref = R.Recording(book, "fake", real)
    torch.manual_seed(0)
    layer = ref.Tiny(3)
    x = torch.randn(2, 3)
    layer(x)
    ref.double(torch.arange(4.0))
    g = torch.Generator().manual_seed(5)
    ref.noisy(torch.zeros(2), g)
    ref.noisy(torch.zeros(2), g)
    monkeypatch.setattr(R, "_BOOK", book)
    return book, layer, x


def test_a_recorded_call_is_answered_and_another_refused(book):
    book, _, _ = book
    ref = R.Recorded(book, "fake")
    assert torch.equal(ref.double(torch.arange(4.0)), 2 * torch.arange(4.0))
    with pytest.raises(R.NotRecorded, match="no answer for this call of double"):
        ref.double(torch.ones(4))
    with pytest.raises(AttributeError, match="another release"):
        _ = ref.triple


def test_a_call_the_release_did_not_make_is_refused_with_what_happened_and_what_to_do(book):
    """Issue 60, part 6: the message does not blame the student's code for a call they made
    themselves; it says what the recorded reference is, that other inputs are not supported,
    and what to do instead, in a test and outside one."""
    book, _, _ = book
    ref = R.Recorded(book, "fake")
    with pytest.raises(R.NotRecorded) as raised:
        ref.double(torch.full((4,), 7.0))
    message = str(raised.value)
    assert "only the reference's answers to the calls the course's release made" in message
    assert "on other inputs is not supported" in message
    assert "In a test" in message and "Outside a test, compute what you need" in message
    assert not message.startswith("the test needs")
    assert isinstance(raised.value, AssertionError)  # a failed check, in a test cell


def test_a_recorded_layer_has_the_parameters_and_answers_its_calls(book):
    book, layer, x = book
    ref = R.Recorded(book, "fake")
    torch.manual_seed(0)
    standin = ref.Tiny(3)
    assert sum(p.numel() for p in standin.parameters()) == 9 and standin.d == 3
    assert torch.allclose(standin.W.weight, layer.W.weight)
    assert torch.allclose(standin(x), layer(x))
    assert torch.allclose(standin.W(x), layer.W(x))  # torch's own layers compute
    with torch.no_grad():
        standin.W.weight.add_(1.0)  # other parameters: not what was recorded
    with pytest.raises(R.NotRecorded):
        standin(x)


def test_a_generator_handed_to_a_recorded_call_advances_as_it_did(book):
    book, _, _ = book
    ref = R.Recorded(book, "fake")
    g = torch.Generator().manual_seed(5)
    first, second = ref.noisy(torch.zeros(2), g), ref.noisy(torch.zeros(2), g)
    h = torch.Generator().manual_seed(5)
    assert torch.allclose(first, noisy(torch.zeros(2), h))
    assert torch.allclose(second, noisy(torch.zeros(2), h))


def test_reference_for_gives_the_recorded_values_with_the_students_gradient(book, monkeypatch):
    book, _, _ = book
    monkeypatch.setattr(R, "instructor_entry", lambda name: None)  # as in the kit
    ref = R.Recorded(book, "fake")
    namespace = {"double": lambda x: 3 * x}  # a wrong earlier exercise
    x = torch.arange(4.0, requires_grad=True)
    with R.reference_for(namespace, double=ref.double):
        y = namespace["double"](x)
        assert torch.equal(y.detach(), 2 * torch.arange(4.0))  # the reference's values
        y.sum().backward()
        assert torch.equal(x.grad, torch.full((4,), 3.0))  # through the student's code
        z = namespace["double"](torch.ones(4))  # not recorded: the student's own
        assert torch.equal(z, torch.full((4,), 3.0))
    assert namespace["double"](torch.ones(1)).item() == 3.0


def test_a_notebook_of_another_release_says_which_kit_it_needs_in_one_line():
    with pytest.raises(R.KitMismatch) as raised:
        R.recorded_values("04_dot_product_attention", kit="0.0.1")
    message = str(raised.value)
    assert "\n" not in message and "0.0.1" in message and attention_course.__version__ in message


def test_every_notebook_names_the_kit_of_this_release():
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert attention_course.__version__ == version
    for chapter in ALL_CHAPTERS:
        text = solution_path(ROOT, chapter).read_text()
        assert re.findall(r'recorded_values\(\\"([0-9a-z_]+)\\", kit=\\"([0-9.]+)\\"\)', text) == [
            (chapter, version)
        ], chapter
        assert (R.DATA / f"{chapter}.pt").is_file(), f"run python -m autograder record {chapter}"
