"""Interactive explorers. In a notebook each is an ipywidgets control that redraws with
the kernel (and draws once when run without a browser, so notebooks stay executable under
nbval and the autograder); with ``static=True``, as the book's pages call them, the same
drawings are made for every setting at build time and stepped through by the browser alone
(see :mod:`attention_course.explorer`). Each ``*_explorer`` function builds the
:class:`~attention_course.explorer.Explorer` that both use."""

import matplotlib.pyplot as plt
import torch
from IPython.display import HTML, display

from attention_course.explorer import Control, Explorer
from attention_course.plots import COLOURS, attention_heatmap


def _show(explorer: Explorer, static: bool) -> None:
    """The widget in Jupyter; the pre-rendered, kernel-free version on the website."""
    display(HTML(explorer.html()) if static else explorer.widget())


def attention_explorer(
    weights, query_labels=None, key_labels=None, title: str = "attention"
) -> Explorer:
    """A slider over query positions: the whole ``(T_q, T_k)`` map with the chosen row
    outlined, and that query's distribution over the keys as bars."""
    w = torch.as_tensor(weights).detach().float().cpu()
    if w.dim() != 2:
        raise ValueError(
            f"explore_attention needs a (queries, keys) matrix, got shape {tuple(w.shape)}"
        )
    T_q, T_k = w.shape
    query_labels = list(query_labels) if query_labels is not None else [str(i) for i in range(T_q)]
    key_labels = list(key_labels) if key_labels is not None else [str(j) for j in range(T_k)]

    def draw(query: int):
        fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
        left.imshow(w.numpy(), cmap="viridis", vmin=0, vmax=1, aspect="auto")
        left.add_patch(
            plt.Rectangle((-0.5, query - 0.5), T_k, 1, fill=False, ec=COLOURS[3], lw=2.5)
        )
        left.set_xticks(range(T_k), key_labels, rotation=60, ha="right")
        left.set_yticks(range(T_q), query_labels)
        left.set_xlabel("keys")
        left.set_ylabel("queries")
        left.set_title(title)
        right.bar(range(T_k), w[query].numpy(), color=COLOURS[0])
        right.set_xticks(range(T_k), key_labels, rotation=60, ha="right")
        right.set_ylim(0, 1)
        right.set_ylabel("weight")
        right.set_title(f"query {query} ({query_labels[query]}) attends to")
        fig.tight_layout()
        return fig

    options = [(f"{i} ({label})", i) for i, label in enumerate(query_labels)]
    return Explorer(
        draw,
        [Control("query", options)],
        alt=f"{title}: the attention map with one query's row outlined, and that row as bars",
    )


def explore_attention(
    weights, query_labels=None, key_labels=None, title: str = "attention", static: bool = False
):
    """Show :func:`attention_explorer`: a widget, or with ``static=True`` its
    pre-rendered frames (for the website)."""
    _show(attention_explorer(weights, query_labels, key_labels, title), static)


def _check_example(label, example) -> tuple[list[str], list[str], torch.Tensor]:
    """``(source_tokens, output_tokens, weights (L, S))`` with L output and S source tokens,
    or a ValueError that says what is wrong with it."""
    if not isinstance(example, tuple | list) or len(example) != 3:
        got = f"{len(example)} items" if isinstance(example, tuple | list) else type(example)
        raise ValueError(
            f"example {label!r} must be a triple (source_tokens, output_tokens, weights), got {got}"
        )
    source, output, weights = example
    if isinstance(source, str) or isinstance(output, str):
        raise ValueError(f"example {label!r}: pass token lists, not strings (use .split())")
    source, output = [str(t) for t in source], [str(t) for t in output]
    w = torch.as_tensor(weights).detach().float().cpu()
    if not source or not output:
        raise ValueError(
            f"example {label!r} has {len(source)} source and {len(output)} output tokens; "
            "both must be non-empty"
        )
    expected = (len(output), len(source))
    if w.dim() != 2 or tuple(w.shape) != expected:
        hint = "; transposed?" if tuple(w.shape) == expected[::-1] else ""
        raise ValueError(
            f"example {label!r}: weights of shape {tuple(w.shape)}, expected {expected} = "
            f"(output tokens, source tokens), one row per output token{hint}"
        )
    return source, output, w


def _draw_tokens(ax, tokens: list[str], current: int, per_line: int = 100):
    """Write ``tokens[: current + 1]`` left to right in a monospace font, wrapping after
    ``per_line`` characters, with ``tokens[current]`` highlighted."""
    ax.axis("off")
    column, line = 0, 0
    for i, tok in enumerate(tokens[: current + 1]):
        if column and column + len(tok) > per_line:
            column, line = 0, line + 1
        highlight = (
            dict(boxstyle="round,pad=0.2", fc=COLOURS[1], ec="none") if i == current else None
        )
        ax.text(
            column / per_line,
            1.0 - 0.28 * line,
            tok,
            family="monospace",
            fontweight="bold" if i == current else "normal",
            va="top",
            bbox=highlight,
            transform=ax.transAxes,
        )
        column += len(tok) + 1


def draw_decoding_step(source, output, weights, step: int, title: str = ""):
    """One step of a decoder with attention: the bars are the weights of output token
    ``step`` over the source tokens (row ``step`` of ``weights``, shape (L, S)); beside
    them the whole map with that row outlined; below, the output so far with the current
    token highlighted. Returns the Figure."""
    source, output, w = _check_example(title or "example", (source, output, weights))
    L, S = w.shape
    if not 0 <= step < L:
        raise ValueError(f"step {step} is outside the {L} decoder steps (0 to {L - 1})")
    fig = plt.figure(figsize=(11, 4.6))
    grid = fig.add_gridspec(2, 2, height_ratios=(3, 1), width_ratios=(1.2, 1))
    bars, full, text = (
        fig.add_subplot(grid[0, 0]),
        fig.add_subplot(grid[0, 1]),
        fig.add_subplot(grid[1, :]),
    )
    bars.bar(range(S), w[step].numpy(), color=COLOURS[0])
    bars.set_xticks(range(S), source, rotation=60, ha="right")
    bars.set_ylim(0, 1)
    bars.set_ylabel("attention weight")
    bars.set_title(f"step {step}: {output[step]!r} looks at")
    full.imshow(w.numpy(), cmap="viridis", vmin=0, vmax=1, aspect="auto")
    full.add_patch(plt.Rectangle((-0.5, step - 0.5), S, 1, fill=False, ec=COLOURS[3], lw=2.5))
    full.set_xticks(range(S), source, rotation=60, ha="right")
    full.set_yticks(range(L), output)
    full.set_title(title or "all steps")
    _draw_tokens(text, output, step)
    text.set_title("output so far", loc="left")
    fig.tight_layout()
    return fig


def decoding_explorer(examples) -> Explorer:
    """Step through greedy decoding with attention, token by token.

    ``examples`` maps a label to ``(source_tokens, output_tokens, weights)``, with weights
    of shape (L, S): L output tokens, S source tokens, row i the weights of output token i
    (what ``translate_with_attention`` returns, with the source it was given). A menu picks
    the example and a slider the decoder step; the slider ends at the example's last step.
    """
    if not hasattr(examples, "items") or not examples:
        raise ValueError(
            "explore_decoding needs a non-empty dict {label: (source, output, weights)}"
        )
    checked = {str(label): _check_example(label, ex) for label, ex in examples.items()}
    labels = list(checked)
    longest = max(len(output) for _, output, _ in checked.values())

    def draw(example: str, step: int):
        source, output, w = checked[example]
        return draw_decoding_step(source, output, w, min(step, len(output) - 1), title=example)

    return Explorer(
        draw,
        [
            Control("example", [(label, label) for label in labels], kind="menu"),
            Control("step", [(str(i), i) for i in range(longest)]),
        ],
        available=lambda v: v["step"] < len(checked[v["example"]][1]),
        alt="one decoder step: its attention weights over the source as bars, the whole map "
        "with that step's row outlined, and the output written so far",
    )


def explore_decoding(examples, static: bool = False):
    """Show :func:`decoding_explorer`: a widget, or with ``static=True`` its pre-rendered
    frames (for the website)."""
    _show(decoding_explorer(examples), static)


def heads_explorer(weights, query_labels=None, key_labels=None, title: str = "head"):
    """Pick a head with a toggle: the ``(T_q, T_k)`` map of that head, from weights of
    shape ``(h, T_q, T_k)`` (one example's weights from a multi-head layer).

    ``title`` names what the first axis holds, in the toggle and the plot's title: pass
    ``title="layer"`` for a stack of one map per layer (chapter 03's multi-step attention)."""
    w = torch.as_tensor(weights).detach().float().cpu()
    if w.dim() != 3:
        raise ValueError(
            f"explore_heads needs (heads, queries, keys) weights, got shape {tuple(w.shape)}; "
            "for a batch, pass weights[0]"
        )

    def draw(head: int):
        return attention_heatmap(
            w[head],
            query_labels=query_labels,
            key_labels=key_labels,
            title=f"{title} {head + 1} of {w.size(0)}",
            xlabel="keys",
            ylabel="queries",
        )

    return Explorer(
        draw,
        [
            Control(
                "head",
                [(str(i + 1), i) for i in range(w.size(0))],
                kind="buttons",
                description=title,
            )
        ],
        alt=f"attention map of one {title}, queries as rows and keys as columns",
    )


def explore_heads(
    weights, query_labels=None, key_labels=None, title: str = "head", static: bool = False
):
    """Show :func:`heads_explorer`: a widget, or with ``static=True`` its pre-rendered
    frames (for the website)."""
    _show(heads_explorer(weights, query_labels, key_labels, title), static)


# Which tokens label the queries and keys of each kind of attention in a Transformer.
_KINDS = {
    "encoder": ("source", "source", "encoder self-attention"),
    "decoder": ("target", "target", "decoder self-attention (causal)"),
    "cross": ("target", "source", "cross-attention (decoder reads the encoder)"),
}


def transformer_explorer(attention: dict, source_tokens, target_tokens) -> Explorer:
    """Pick the kind of attention, the layer and the head of an encoder-decoder model and
    see that head's map for one sentence.

    ``attention`` maps "encoder", "decoder" and "cross" to lists (one item per layer) of
    weights ``(h, T_q, T_k)`` or ``(1, h, T_q, T_k)``; the tokens label the axes.
    """
    maps = {}
    for kind in _KINDS:
        if kind not in attention or not attention[kind]:
            raise ValueError(
                f"attention needs a non-empty list for {kind!r}; got {sorted(attention)}"
            )
        layers = [torch.as_tensor(w).detach().float().cpu() for w in attention[kind]]
        maps[kind] = [w[0] if w.dim() == 4 else w for w in layers]  # (h, T_q, T_k) each
    labels = {"source": list(source_tokens), "target": list(target_tokens)}
    for kind, (q, k, _) in _KINDS.items():
        shape = tuple(maps[kind][0].shape[1:])
        if shape != (len(labels[q]), len(labels[k])):
            raise ValueError(
                f"{kind} weights are {shape} = (queries, keys), but there are "
                f"{len(labels[q])} {q} and {len(labels[k])} {k} tokens"
            )

    def draw(kind: str, layer: int, head: int):
        q, k, title = _KINDS[kind]
        return attention_heatmap(
            maps[kind][layer][head],
            query_labels=labels[q],
            key_labels=labels[k],
            title=f"{title}, layer {layer + 1}, head {head + 1}",
            xlabel=f"keys ({k})",
            ylabel=f"queries ({q})",
        )

    num_layers, num_heads = len(maps["encoder"]), maps["encoder"][0].size(0)
    return Explorer(
        draw,
        [
            Control("kind", [(kind, kind) for kind in _KINDS], kind="menu", value="cross"),
            Control("layer", [(str(i + 1), i) for i in range(num_layers)], value=num_layers - 1),
            Control("head", [(str(i + 1), i) for i in range(num_heads)]),
        ],
        alt="attention map of one head of the Transformer, queries as rows and keys as columns",
    )


def explore_transformer_attention(
    attention: dict, source_tokens, target_tokens, static: bool = False
):
    """Show :func:`transformer_explorer`: a widget, or with ``static=True`` its
    pre-rendered frames (for the website)."""
    _show(transformer_explorer(attention, source_tokens, target_tokens), static)


def _steps(start: float, stop: float, step: float) -> list[float]:
    """start, start + step, ..., stop, rounded so that labels and comparisons are exact."""
    count = round((stop - start) / step)
    return [float(round(start + i * step, 6)) for i in range(count + 1)]


def sampling_explorer(
    grid_fn,
    sample_fn,
    theta_fn,
    image,
    out_size: int = 40,
    on_page: dict | None = None,
) -> Explorer:
    """Sliders over a rotation, a scale and a shift: the affine theta they make, the points
    its grid samples drawn on ``image`` (H, W), and the warped image.

    ``grid_fn(theta, size)`` and ``sample_fn(U, grid)`` are an affine grid generator and
    a bilinear sampler, ``theta_fn(degrees, scale, (shift_x, shift_y))`` the theta (2, 3)
    that shows a digit of that pose upright (the notebook passes the student's own three,
    ``undo_distortion`` the last). ``on_page`` maps a slider
    ("degrees", "scale", "shift_x", "shift_y") to the few values drawn for the website;
    by default rotations every 30 degrees and four scales, the shifts at zero.
    """
    from attention_course.plots import draw_sampling_grid

    image = torch.as_tensor(image).detach().float().cpu()
    if image.dim() != 2:
        raise ValueError(f"explore_sampling needs one image (H, W), got {tuple(image.shape)}")
    on_page = {
        "degrees": _steps(-180, 180, 30),
        "scale": [0.5, 0.75, 1.0, 1.25],
        "shift_x": [0.0],
        "shift_y": [0.0],
        **(on_page or {}),
    }

    def draw(degrees: float, scale: float, shift_x: float, shift_y: float):
        with torch.no_grad():
            theta = torch.as_tensor(theta_fn(degrees, scale, (shift_x, shift_y))).float()[None]
            grid = grid_fn(theta, (1, 1, out_size, out_size))  # (1, H', W', 2)
            warped = sample_fn(image[None, None], grid)  # (1, 1, H', W')
        fig, (left, right) = plt.subplots(1, 2, figsize=(8, 4))
        draw_sampling_grid(left, image, grid[0], title="input and the points sampled")
        right.imshow(warped[0, 0].numpy(), cmap="gray", vmin=0, vmax=1)
        right.set_xticks([])
        right.set_yticks([])
        right.set_title("output V (red dot: its top-left pixel)")
        rows = [" ".join(f"{v:6.2f}" for v in r) for r in theta[0].tolist()]
        fig.suptitle("theta = [" + " ; ".join(rows) + "]", family="monospace", fontsize=10)
        fig.tight_layout()
        return fig

    def slider(name, description, values, value, unit=""):
        options = [(f"{v:g}{unit}", v) for v in values]
        return Control(name, options, value=value, on_page=on_page[name], description=description)

    return Explorer(
        draw,
        [
            slider("degrees", "rotation", _steps(-180, 180, 5), 0.0, "°"),
            slider("scale", "scale", _steps(0.2, 1.5, 0.05), 1.0),
            slider("shift_x", "shift x", _steps(-1, 1, 0.05), 0.0),
            slider("shift_y", "shift y", _steps(-1, 1, 0.05), 0.0),
        ],
        alt="left, the input digit with the grid of points that theta samples; right, the "
        "output the bilinear sampler reads there",
    )


def explore_sampling(grid_fn, sample_fn, theta_fn, image, out_size: int = 40, static: bool = False):
    """Show :func:`sampling_explorer`: sliders in a notebook, or with ``static=True`` its
    pre-rendered frames (for the website)."""
    _show(sampling_explorer(grid_fn, sample_fn, theta_fn, image, out_size), static)
