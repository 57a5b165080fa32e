"""Chapter 10's findings (attention_course/findings.py, benchmarks/since_2023.py): each rule
fails when its finding is missed, on canned rows, and the benchmark exits 1 on a miss."""

import pytest
import torch

from attention_course import findings
from autograder.reference.since_2023 import delta_rule, delta_rule_parallel
from benchmarks import since_2023

SEEDS = (0, 1, 2)


def recall_rows(softmax=1.0, linear=0.3, delta=0.5, seeds=SEEDS, start=0.97):
    """Each mixer recalls ``start`` (softmax attention: its own top) at 8 pairs, then
    falls evenly to its top at 32."""
    rows = []
    for seed in seeds:
        for n, part in ((8, 0.0), (16, 0.5), (32, 1.0)):
            for mixer, top in (("softmax", softmax), ("linear", linear), ("delta", delta)):
                first = top if mixer == "softmax" else start
                rows.append(
                    {"mixer": mixer, "num_pairs": n, "seed": seed,
                     "accuracy": first + part * (top - first), "state_numbers_per_layer": 256}
                )  # fmt: skip
    return rows


def test_recall_needs_softmax_to_keep_recalling_and_both_recurrent_mixers_to_forget():
    held = findings.recall(recall_rows())
    assert held.held and held.facts["delta_between"] and held.facts["largest"] == 32
    assert held.facts["first"] == 8 and held.facts["held_on_seeds"] == list(SEEDS)
    assert held.facts["accuracy"]["linear"][32]["mean"] == pytest.approx(0.3)
    assert not findings.recall(recall_rows(softmax=0.85)).held  # softmax no longer recalls
    assert not findings.recall(recall_rows(delta=0.95)).held  # delta as good as softmax
    assert not findings.recall(recall_rows(linear=0.93)).held  # linear too close to softmax
    flat = findings.recall(recall_rows(linear=0.7, delta=0.75, start=0.78))  # no forgetting
    assert not flat.held and flat.facts["recurrent_behind"] and not flat.facts["recurrent_fall"]
    assert flat.facts["held_on_seeds"] == []
    # where the delta rule stands against linear attention is reported, not judged
    swapped = findings.recall(recall_rows(linear=0.5, delta=0.3))
    assert swapped.held and not swapped.facts["delta_between"]
    assert swapped.facts["delta_above_linear"] == 0
    one_seed = [r for r in recall_rows(linear=0.5, delta=0.3) if r["seed"] != 1]
    one_seed += recall_rows(seeds=(1,))
    assert findings.recall(one_seed).facts["delta_above_linear"] == 1
    assert not findings.recall([]).held
    assert not findings.recall([r for r in recall_rows() if r["num_pairs"] == 32]).held


def test_a_recall_run_that_did_not_learn_is_missing_data_not_evidence():
    """A run whose final training loss is above the line is left out with its seed; the
    finding is judged on the seeds whose every run learned, and needs three of them."""
    rows = recall_rows(seeds=(0, 1, 2, 3))
    for r in rows:
        r["final_training_loss"] = 0.5 if r["mixer"] != "softmax" else 0.01
    stuck = next(
        r for r in rows if r["mixer"] == "delta" and r["num_pairs"] == 32 and r["seed"] == 3
    )
    stuck["final_training_loss"], stuck["accuracy"] = 1.7, 0.9  # not learned, and would miss
    verdict = findings.recall(rows, not_learned_above=1.04)
    assert verdict.held and verdict.facts["judged_seeds"] == [0, 1, 2]
    assert verdict.facts["not_learned"] == [
        {"mixer": "delta", "num_pairs": 32, "seed": 3, "final_training_loss": 1.7}
    ]
    assert not findings.recall(rows).held  # counted as evidence, it would miss
    # nor does a stuck run count for the finding: with two learned seeds it is not judged
    for r in rows:
        if r["seed"] == 2 and r["mixer"] == "linear":
            r["final_training_loss"] = 2.0
    fewer = findings.recall(rows, not_learned_above=1.04)
    assert not fewer.held and not fewer.facts["judged"] and fewer.facts["judged_seeds"] == [0, 1]
    assert "percentage points" in fewer.rule


def test_a_recall_run_that_never_leaves_the_plateau_is_trained_again(monkeypatch):
    """Only a run whose loss ends above a quarter of the loss of guessing (ln 64 / 4 =
    1.04) is restarted, from a new initialisation, at most ``RESTARTS`` times; the run with
    the lowest loss is kept, and the row says how many times."""
    from attention_course.training import History

    def fake_training(ending):
        calls = []

        def train(model, num_pairs, **options):
            calls.append(torch.initial_seed())
            loss = ending[min(len(calls), len(ending)) - 1]
            return History(steps=list(range(1, 51)), losses=[loss] * 50)

        return train, calls

    monkeypatch.setitem(since_2023.SETTINGS["recall"], "eval_sequences", 4)
    cases = (
        ([0.9], 0, 0.9),
        ([1.7, 0.1], 1, 0.1),
        ([3.7, 1.7, 3.0], since_2023.RESTARTS, 1.7),
    )
    for ending, restarts, kept in cases:
        train, calls = fake_training(ending)
        monkeypatch.setattr(since_2023, "train_recall", train)
        row = since_2023.recall_run("softmax", 4, seed=7)
        assert row["restarts"] == restarts and len(calls) == restarts + 1
        assert calls == [7 + 1000 * k for k in range(restarts + 1)]  # new initialisations
        assert row["final_training_loss"] == kept


LATENT_SEEDS = tuple(range(8))


def latent_rows(mla=0.99, narrow=0.3, seeds=LATENT_SEEDS, mla_cache=32):
    rows = []
    for seed in seeds:
        wobble = 0.005 * (seed % 3)
        for kind, acc, cache in (("MHA", 0.99, 64), ("GQA", 0.99, 32), ("MQA", 0.985, 16),
                                 ("MLA", mla, mla_cache), ("MLA-narrow", narrow, 4)):  # fmt: skip
            rows.append(
                {"attention": kind, "seed": seed, "accuracy": acc - wobble if kind != "MHA" else acc,
                 "cache_numbers_per_token_per_layer": cache, "parameters": 25400, "steps": 500,
                 "final_training_loss": 0.02 if kind != "MLA-narrow" else 2.5}
            )  # fmt: skip
    return rows


def test_latent_cache_needs_the_control_to_fail_and_mla_to_keep_mhas_recall():
    held = findings.latent_cache(latent_rows(), not_learned_above=1.04)
    assert (
        held.held
        and held.facts["control_failed"]
        and held.facts["judged_seeds"] == list(LATENT_SEEDS)
    )
    mean, half = held.facts["interval"]["MLA"]
    assert mean == pytest.approx(-0.005, abs=1e-3) and 0 < half < 0.01
    assert not findings.latent_cache(latent_rows(mla=0.95)).held  # MLA behind MHA
    assert not findings.latent_cache(latent_rows(narrow=0.9)).held  # the control did not fail
    assert not findings.latent_cache(latent_rows(mla_cache=48)).held  # cache not GQA's
    assert not findings.latent_cache(latent_rows(seeds=range(5))).held  # too few seeds
    assert not findings.latent_cache([]).held
    # a judged arm that did not learn is missing data; its seed is not judged
    rows = latent_rows()
    rows[3]["final_training_loss"] = 3.0  # MLA on seed 0
    missing = findings.latent_cache(rows, not_learned_above=1.04)
    assert missing.facts["judged_seeds"] == list(LATENT_SEEDS[1:]) and not missing.facts["judged"]
    assert missing.facts["not_learned"] == [
        {"attention": "MLA", "seed": 0, "final_training_loss": 3.0}
    ]


def test_the_latent_arms_are_matched_in_parameters_and_mla_in_cache():
    from attention_course.recall_model import RecallModel
    from attention_course.training import parameter_count

    counts = {
        kind: parameter_count(RecallModel(since_2023.latent_config(kind), since_2023.RECALL_PARTS))
        for kind in since_2023.SETTINGS["latent_cache"]["arms"]
    }
    assert all(abs(n / counts["MHA"] - 1) < 0.005 for n in counts.values()), counts
    caches = {k: since_2023.latent_config(k).cache_numbers() for k in counts}
    assert caches["MLA"] == caches["GQA"] < caches["MHA"] and caches["MLA-narrow"] < caches["MQA"]


def stretching_rows(pi=0.3, yarn=0.25, none=0.1, seeds=SEEDS):
    rows = []
    for seed in seeds:
        rows.append(
            {"method": "trained", "factor": 1, "seed": seed, "loss": 0.15, "accuracy": 0.95}
        )
        for f in (2, 4, 8):
            for method, loss in (("unchanged", 1.0), ("pi_untuned", 2.0), ("yarn_untuned", 0.8),
                                 ("none", none), ("pi", pi), ("yarn", yarn)):  # fmt: skip
                rows.append(
                    {"method": method, "factor": f, "seed": seed, "loss": loss * f / 4,
                     "accuracy": 0.9}
                )  # fmt: skip
    return rows


def test_stretching_needs_no_extension_ahead_of_pi_and_yarn_at_4x_and_8x():
    held = findings.stretching(stretching_rows())
    assert held.held and not held.facts["papers_order"] and held.facts["beats"]["pi"][8] == 0
    assert held.facts["yarn_below_pi"] == held.facts["pairs"] == 9
    assert held.facts["untuned_yarn_below_unchanged"] == 9
    assert held.facts["untuned_pi_below_unchanged"] == 0
    assert not findings.stretching(stretching_rows(pi=0.05)).held
    assert not findings.stretching(stretching_rows(yarn=0.1)).held  # a tie is no win
    papers = findings.stretching(stretching_rows(pi=0.05, yarn=0.04))
    assert not papers.held and papers.facts["papers_order"]
    assert not findings.stretching([]).held


def sink_rows(share=0.2, window=1.0, window_sinks=0.5, seeds=SEEDS):
    rows = []
    for seed in seeds:
        for model in ("plain", "sink_logit", "gated"):
            rows.append(
                {"model": model, "seed": seed, "uniform_share": 0.02,
                 "first_position_share": share if model == "plain" else 0.01,
                 "sink_weight": 0.3 if model == "sink_logit" else None,
                 "loss_dense": 0.9, "loss_window": window, "loss_window_sinks": window_sinks}
            )  # fmt: skip
    return rows


def test_sinks_need_a_heavy_first_position_and_a_loss_that_the_sinks_save():
    held = findings.sinks(sink_rows())
    assert held.held and held.facts["ratio"]["plain"] == pytest.approx(10)
    assert held.facts["sink_weight"]["mean"] == pytest.approx(0.3)
    none = findings.sinks(sink_rows(share=0.02))
    assert not none.held and not none.facts["sink_at_first"] and none.facts["sinks_help"]
    assert not findings.sinks(sink_rows(window_sinks=0.98)).held


def test_the_parallel_delta_rule_is_the_recurrence():
    g = torch.Generator().manual_seed(0)
    Q, K = (torch.nn.functional.normalize(torch.randn(2, 3, 20, 8, generator=g), dim=-1)
            for _ in range(2))  # fmt: skip
    V, beta = torch.randn(2, 3, 20, 5, generator=g), torch.rand(2, 3, 20, generator=g)
    out, state = delta_rule_parallel(Q, K, V, beta)
    want, want_state = delta_rule(Q, K, V, beta)
    torch.testing.assert_close(out, want, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(state, want_state, atol=1e-5, rtol=1e-4)


def test_the_stretchable_attention_is_chapter_08s_with_the_default_frequencies():
    from attention_course.language_model import DecoderLM

    torch.manual_seed(0)
    model = DecoderLM(since_2023.counting_config(), since_2023.PARTS).eval()
    x = torch.randint(0, model.cfg.vocab_size, (2, 24))
    with torch.no_grad():
        torch.testing.assert_close(
            since_2023.as_stretchable(model)(x)[0], model(x)[0], atol=1e-4, rtol=1e-4
        )


@pytest.mark.parametrize(
    "only, rows, status",
    [
        ("recall", recall_rows(), 0),
        ("recall", recall_rows(delta=0.95), 1),
        ("latent_cache", latent_rows(), 0),
        ("latent_cache", latent_rows(mla=0.9), 1),
        ("stretching", stretching_rows(), 0),
        ("stretching", stretching_rows(pi=0.05), 0),  # reported, not judged
        ("sinks", sink_rows(share=0.02), 0 if "sinks" not in since_2023.TARGETS else 1),
    ],
)
def test_the_benchmark_exits_1_on_a_missed_target(monkeypatch, only, rows, status):
    assert since_2023.TARGETS == ("recall", "latent_cache")
    monkeypatch.setattr(since_2023, "run", lambda finding, seeds, jobs=1: {only: rows})
    monkeypatch.setattr(since_2023.torch, "set_num_threads", lambda n: None)  # this process's
    assert since_2023.main(["--only", only, "--seeds", "0", "1", "2"]) == status
