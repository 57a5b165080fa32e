"""The experiment of chapter 07: a CNN, and the same CNN behind a spatial transformer, on
handwritten digits rotated, scaled and shifted across a 40 x 40 canvas (RTS).

::

    cfg = spatial_settings()  # smaller when the autograder runs the notebook
    cnn = train_classifier(CNN(), cfg, seed=0)
    st_cnn = train_classifier(STClassifier(my_transformer, CNN()), cfg, seed=0)
    print(cnn.error, st_cnn.error)

Both get the same data, steps and optimiser. Training is bounded by steps, so the numbers
repeat run after run whatever the machine's load; ``seconds`` is only a safety cap.
Measured over three seeds in ``benchmarks/spatial.py``.
"""

from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import nn

from attention_course.data.digits import RTS, Distortion, distorted_digits
from attention_course.runtime import grading_mode, set_seed
from attention_course.training import History, train


class CNN(nn.Module):
    """The classifier of the chapter: two conv-ReLU-max-pool blocks and two linear layers.

    Pooling makes it invariant to shifts of a pixel or two, not to rotations, scales or
    shifts across the canvas: that is what it must learn from the data.
    """

    def __init__(self, in_size: int = 40, channels: int = 1, num_classes: int = 10):
        super().__init__()
        self.layers = nn.Sequential(
            nn.Conv2d(channels, 8, 5, padding=2),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 5, padding=2),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Flatten(),
            nn.Linear(16 * (in_size // 4) ** 2, 64),
            nn.ReLU(),
            nn.Linear(64, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (N, C, H, W) -> logits (N, num_classes)."""
        return self.layers(x)


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
    # The localisation network learns at 0.3 times the rate: at the full rate its hidden
    # ReLUs can all die early in training on some machines' arithmetic (seen on seed 0:
    # theta became one constant, and the ST-CNN ended worse than the CNN).
    localisation_lr_scale: float = 0.3
    eval_every: int = 100


FULL_SETTINGS = SpatialSettings()
GRADING_SETTINGS = replace(FULL_SETTINGS, num_test=300, max_steps=60, seconds=10.0)


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
) -> ClassifierRun:
    """Train ``model`` (logits from images) on the distorted training digits of ``seed``
    and measure its test error. Batches are drawn by a generator seeded by ``seed``, so two
    models trained with one seed see the same images in the same order."""
    x_train, y_train = training_set(cfg, seed)
    x_test, y_test = test_set(cfg)
    set_seed(seed)
    order = torch.Generator().manual_seed(seed)

    def next_batch(step):
        pick = torch.randint(len(y_train), (cfg.batch_size,), generator=order)
        return x_train[pick], y_train[pick]

    def loss_fn(m, batch):
        x, y = batch
        return F.cross_entropy(m(x), y)

    history = train(
        model,
        next_batch=next_batch,
        loss_fn=loss_fn,
        seconds=cfg.seconds,
        max_steps=cfg.max_steps,
        optimizer=_adam(model, cfg),
        evaluate=lambda m: {"test error": error_rate(m, x_test, y_test)},
        eval_every=cfg.eval_every,
        progress=progress,
    )
    return ClassifierRun(model, history, history.last("test error"))
