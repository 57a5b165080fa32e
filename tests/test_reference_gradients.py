"""Chapter 01's measurement of vanishing gradients (autograder/reference/gradients.py)."""

import math

import pytest
import torch

from autograder.reference.gradients import (
    gradient_norm_by_distance,
    jacobian_norms,
    make_recurrent,
)


@pytest.mark.parametrize("kind", ["rnn", "gru"])
def test_jacobian_norms_match_autograd_jacobian(kind):
    torch.manual_seed(0)
    rnn = make_recurrent(kind, d_input=3, d_hidden=5)
    x = torch.randn(2, 6, 3)  # (N, T, D)
    norms = jacobian_norms(rnn, x)
    assert norms.shape == (2, 6)
    for n in range(2):

        def last_state(x_n, n=n):
            return rnn(x_n[None])[1][-1, 0]  # h_T of sequence n  (H,)

        jac = torch.autograd.functional.jacobian(last_state, x[n])  # (H, T, D)
        expected = jac.pow(2).sum(dim=(0, 2)).sqrt()  # (T,)
        torch.testing.assert_close(norms[n], expected, rtol=1e-4, atol=1e-7)


def test_rnn_gradient_vanishes_with_a_small_recurrent_scale():
    norms = gradient_norm_by_distance("rnn", length=50, recurrent_scale=0.5, seeds=(0, 1))
    assert len(norms) == 50
    assert all(math.isfinite(v) and v > 0 for v in norms)
    # orders of magnitude smaller 40 steps back than 1 step back
    assert norms[40] < 1e-6 * norms[1], f"distance 1: {norms[1]:.3g}, distance 40: {norms[40]:.3g}"


def test_rnn_gradient_obeys_the_singular_value_bound():
    """||dh_T/dx_t||_F <= ||W_ih||_F sigma_max(W_hh)^(T-t), since |tanh'| <= 1."""
    torch.manual_seed(0)
    rnn = make_recurrent("rnn", d_input=4, d_hidden=16, recurrent_scale=0.7)
    x = torch.randn(3, 30, 4)
    norms = jacobian_norms(rnn, x).flip(1)  # by distance  (N, T)
    sigma = torch.linalg.matrix_norm(rnn.weight_hh_l0.detach(), ord=2)
    bound = rnn.weight_ih_l0.detach().norm() * sigma ** torch.arange(30)  # (T,)
    assert (norms <= bound * (1 + 1e-4)).all()


def test_larger_recurrent_scale_keeps_more_gradient():
    small, large = (
        gradient_norm_by_distance("rnn", length=30, recurrent_scale=s, seeds=(0,))
        for s in (0.5, 1.5)
    )
    assert large[25] > 1e3 * small[25]
    assert large[25] > 0.1 * large[1], "a recurrent scale of 1.5 should not make gradients vanish"


def test_gru_that_keeps_its_state_passes_gradients_far_back():
    rnn = gradient_norm_by_distance("rnn", length=45, recurrent_scale=0.5, seeds=(0,))
    gru = gradient_norm_by_distance("gru", length=45, update_bias=4.0, seeds=(0,))
    assert gru[40] / gru[1] > 1e-2
    assert gru[40] / gru[1] > 1e4 * rnn[40] / rnn[1]


def test_measurement_is_deterministic_for_a_seed():
    a = gradient_norm_by_distance("gru", length=12, num_sequences=4, seeds=(3,))
    b = gradient_norm_by_distance("gru", length=12, num_sequences=4, seeds=(3,))
    c = gradient_norm_by_distance("gru", length=12, num_sequences=4, seeds=(4,))
    assert a == b
    assert a != c


def test_recurrent_scale_sets_the_spectral_radius():
    torch.manual_seed(0)
    rnn = make_recurrent("rnn", 8, 128, recurrent_scale=1.5)
    radius = torch.linalg.eigvals(rnn.weight_hh_l0.detach()).abs().max().item()
    assert 1.3 < radius < 1.7


def test_update_bias_opens_the_update_gate():
    torch.manual_seed(0)
    gru = make_recurrent("gru", 4, 8, update_bias=5.0)
    H = 8
    assert (gru.bias_hh_l0[H : 2 * H] > 4.0).all()  # z block
    assert (gru.bias_hh_l0[:H].abs() < 1.0).all()  # the reset gate is untouched


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="unknown recurrent network"):
        make_recurrent("lstm", 4, 8)
    with pytest.raises(ValueError, match="update gate"):
        make_recurrent("rnn", 4, 8, update_bias=1.0)
    with pytest.raises(ValueError, match="length"):
        gradient_norm_by_distance("rnn", length=0)
