"""The experiment of chapter 07: a CNN, and the same CNN behind a spatial transformer, on
handwritten digits rotated, scaled and shifted across a 40 x 40 canvas (RTS).

::

    cfg = spatial_settings()  # smaller when the autograder runs the notebook
    st_cnn = train_classifier(STClassifier(my_transformer, CNN()), cfg, seed=0)
    width = matched_width(parameter_count(st_cnn.model))  # the CNN gets as many parameters
    cnn = train_classifier(CNN(hidden=width), cfg, seed=0)
    print(cnn.error, st_cnn.error)

Both get the same data, steps, optimiser and schedule, and (the CNN's hidden layer widened)
the same number of parameters. Training is bounded by steps, so the numbers repeat run after
run whatever the machine's load; ``seconds`` is only a safety cap. Measured over several
seeds in ``benchmarks/spatial.py``.
"""

from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import nn

from attention_course.data.digits import RTS, Distortion, distorted_digits
from attention_course.runtime import grading_mode, set_seed
from attention_course.training import History, parameter_count, train


class CNN(nn.Module):
    """The classifier of the chapter: two conv-ReLU-max-pool blocks and two linear layers.

    Pooling makes it invariant to shifts of a pixel or two, not to rotations, scales or
    shifts across the canvas: that is what it must learn from the data.
    """

    def __init__(
        self, in_size: int = 40, channels: int = 1, num_classes: int = 10, hidden: int = 64
    ):
        super().__init__()
        self.layers = nn.Sequential(
            nn.Conv2d(channels, 8, 5, padding=2),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 5, padding=2),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Flatten(),
            nn.Linear(16 * (in_size // 4) ** 2, hidden),
            nn.ReLU(),
            nn.Linear(hidden, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (N, C, H, W) -> logits (N, num_classes)."""
        return self.layers(x)


def matched_width(params: int, in_size: int = 40, channels: int = 1) -> int:
    """The hidden width at which a ``CNN`` has the number of parameters closest to
    ``params``: the CNN's parameters grow by the same amount with each hidden unit."""
    with torch.random.fork_rng():  # counting must not move the seeded generator
        one, two = (parameter_count(CNN(in_size, channels, hidden=h)) for h in (1, 2))
    return max(1, round(1 + (params - one) / (two - one)))


@dataclass(frozen=True)
class SpatialSettings:
    """Data and training budget of chapter 07's experiment."""

    distortion: Distortion = RTS
    num_train: int = 10000  # distorted training digits, drawn once from the training split
    num_test: int = 2000  # distorted test digits, drawn from the held-out split
    batch_size: int = 64
    max_steps: int = 800
    seconds: float = 60.0  # a safety cap per model; on 2 cores the steps run out first
    lr: float = 2e-3
    # The localisation network learns at this times the rate: at the full rate its theta
    # can run off the canvas in the first few hundred steps, while the classifier still
    # guesses (seen on seed 3): the sampler then reads only zeros, whose gradient is zero,
    # and theta never comes back.
    localisation_lr_scale: float = 0.3
    # Every learning rate rises linearly from lr / warmup_steps to its full value over the
    # first warmup_steps steps (0: no warm-up): Adam's first steps, taken before its
    # estimates of the gradients' scale settle, are then small.
    warmup_steps: int = 100
    eval_every: int = 100


FULL_SETTINGS = SpatialSettings()
GRADING_SETTINGS = replace(FULL_SETTINGS, num_test=300, max_steps=60, seconds=10.0, warmup_steps=10)


def spatial_settings() -> SpatialSettings:
    """The settings for this run: full, or short in grading mode."""
    return GRADING_SETTINGS if grading_mode() else FULL_SETTINGS


class STClassifier(nn.Module):
    """A spatial transformer in front of a classifier: logits = classifier(V), with
    V, theta = transformer(U). ``forward`` returns the logits; ``rectify`` V and theta."""

    def __init__(self, transformer: nn.Module, classifier: nn.Module):
        super().__init__()
        self.transformer = transformer
        self.classifier = classifier

    def rectify(self, x: torch.Tensor):
        """x (N, C, H, W) -> V (N, C, H', W') and theta (N, 2, 3)."""
        return self.transformer(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        V, _ = self.transformer(x)
        return self.classifier(V)


def training_set(cfg: SpatialSettings = FULL_SETTINGS, seed: int = 0):
    """``cfg.num_train`` training digits, distorted once (drawing them afresh each step
    would cost a third of the training time): images (N, 1, 40, 40), labels (N,)."""
    return distorted_digits(
        cfg.num_train, "train", cfg.distortion, generator=torch.Generator().manual_seed(seed)
    )


def test_set(cfg: SpatialSettings = FULL_SETTINGS, poses: bool = False):
    """The fixed test set: ``cfg.num_test`` held-out digits, distorted (the same for every
    model and seed); with ``poses=True`` also the poses that placed them."""
    generator = torch.Generator().manual_seed(10_000)
    return distorted_digits(cfg.num_test, "test", cfg.distortion, generator, poses=poses)


@torch.no_grad()
def error_rate(model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch: int = 500) -> float:
    """The share of ``x`` that ``model`` classifies wrongly."""
    model.eval()
    wrong = sum(
        (model(x[i : i + batch]).argmax(-1) != y[i : i + batch]).sum().item()
        for i in range(0, len(y), batch)
    )
    return wrong / len(y)


@torch.no_grad()
def pose_correlations(model: nn.Module, x: torch.Tensor, poses) -> dict[str, float]:
    """How closely the transformer's theta = [A | b] follows the poses that placed ``x``:
    the correlation, over ``x``, of b with the digit's position t (x and y), of sqrt(det A)
    with its scale k, and of the rotation in A with its angle a. ``poses`` is (degrees,
    scale, shift) as ``test_set(cfg, poses=True)`` returns them; ``model`` an STClassifier."""
    degrees, scale, shift = poses
    model.eval()
    _, theta = model.rectify(x)
    A = theta[:, :, :2]
    chosen_and_true = {
        "x": (theta[:, 0, 2], shift[:, 0]),
        "y": (theta[:, 1, 2], shift[:, 1]),
        "scale": (torch.linalg.det(A).abs().sqrt(), scale),
        "angle": (
            torch.rad2deg(torch.atan2(A[:, 1, 0] - A[:, 0, 1], A[:, 0, 0] + A[:, 1, 1])),
            degrees,
        ),
    }
    out = {}
    for name, (chosen, true) in chosen_and_true.items():
        r = torch.corrcoef(torch.stack([chosen, true]))[0, 1].item()
        out[name] = r if r == r else 0.0  # a constant choice (the identity) correlates with nothing
    return out


@dataclass
class ClassifierRun:
    model: nn.Module
    history: History
    error: float


def _adam(model: nn.Module, cfg: SpatialSettings) -> torch.optim.Adam:
    """Adam at ``cfg.lr``, and at ``cfg.lr * cfg.localisation_lr_scale`` for the parameters
    of any submodule named ``localisation`` (a spatial transformer's f_loc)."""
    slow = {
        id(p)
        for name, module in model.named_modules()
        if name.split(".")[-1] == "localisation"
        for p in module.parameters()
    }
    params = list(model.parameters())
    groups = [{"params": [p for p in params if id(p) not in slow], "lr": cfg.lr}]
    if slow:
        groups.append(
            {
                "params": [p for p in params if id(p) in slow],
                "lr": cfg.lr * cfg.localisation_lr_scale,
            }
        )
    return torch.optim.Adam(groups, lr=cfg.lr)


def train_classifier(
    model: nn.Module,
    cfg: SpatialSettings = FULL_SETTINGS,
    *,
    seed: int = 0,
    progress: bool | None = None,
    track_poses: bool = False,
    validation: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> ClassifierRun:
    """Train ``model`` (logits from images) on the distorted training digits of ``seed``
    and measure its test error. Batches are drawn by a generator seeded by ``seed``, so two
    models trained with one seed see the same images in the same order. With
    ``track_poses`` (an STClassifier), every evaluation also logs ``pose_correlations`` on
    the test digits, as ``corr x``, ``corr y``, ``corr scale`` and ``corr angle``. With
    ``validation`` (images, labels), every evaluation also logs ``validation error``, by
    which a checkpoint can be chosen without looking at the test digits."""
    x_train, y_train = training_set(cfg, seed)
    x_test, y_test, poses = test_set(cfg, poses=True)
    set_seed(seed)
    order = torch.Generator().manual_seed(seed)
    optimizer = _adam(model, cfg)
    peak = [group["lr"] for group in optimizer.param_groups]

    def next_batch(step):
        # train() has no scheduler: the warm-up sets this step's rates where its batch is drawn
        ramp = min(1.0, (step + 1) / cfg.warmup_steps) if cfg.warmup_steps else 1.0
        for group, lr in zip(optimizer.param_groups, peak, strict=True):
            group["lr"] = lr * ramp
        pick = torch.randint(len(y_train), (cfg.batch_size,), generator=order)
        return x_train[pick], y_train[pick]

    def evaluate(m):
        metrics = {"test error": error_rate(m, x_test, y_test)}
        if validation is not None:
            metrics["validation error"] = error_rate(m, *validation)
        if track_poses:
            metrics |= {f"corr {k}": r for k, r in pose_correlations(m, x_test, poses).items()}
        return metrics

    def loss_fn(m, batch):
        x, y = batch
        return F.cross_entropy(m(x), y)

    history = train(
        model,
        next_batch=next_batch,
        loss_fn=loss_fn,
        seconds=cfg.seconds,
        max_steps=cfg.max_steps,
        optimizer=optimizer,
        evaluate=evaluate,
        eval_every=cfg.eval_every,
        progress=progress,
    )
    return ClassifierRun(model, history, history.last("test error"))
