"""Leviathan et al.'s formula, the α/γ/c/v estimators and the diagnosis, on hand-built recorded traces."""

from __future__ import annotations

import pytest

from playground import theory
from playground.trace import Step, Trace, acceptance_by_position, check_invariants, classify_step


def step(i: int, drafted: list[int], emitted: list[int], draft_ms: float, verify_ms: float, cut: bool = False,
         other_ms: float = 0.0) -> Step:
    accepted, rejected, discarded, unverified = classify_step(drafted, emitted, cut)
    return Step(index=i, drafted=drafted, accepted=accepted, rejected=rejected, discarded=discarded, emitted=emitted,
                unverified=unverified, emitted_text=[f"<{t}>" for t in emitted], draft_ms=draft_ms, verify_ms=verify_ms,
                other_ms=other_ms)


def make_trace(method: str, steps: list[Step], elapsed_s: float, dtype: str = "float32") -> Trace:
    t = Trace(method=method, target="t", prompt="p", env={"dtype": dtype}, decoding={"sample": False},
              steps=steps, output_ids=[tok for s in steps for tok in s.emitted])
    t.summarize(elapsed_s)
    check_invariants(t)
    return t


def baseline_trace(n: int = 10, prefill_ms: float = 500.0, step_ms: float = 100.0, dtype: str = "float32") -> Trace:
    steps = [step(i, [], [100 + i], 0.0, prefill_ms if i == 0 else step_ms) for i in range(n)]
    return make_trace("baseline", steps, (prefill_ms + (n - 1) * step_ms) / 1000, dtype)


def method_trace(dtype: str = "float32") -> Trace:
    """Known figures: α = 8/10 (8 accepted of 10 judged; 8 of the 14 verified drafts kept), γ = 4, c = 0.05,
    v = 1.5, e = 0.2, empty-step cost 1.01 (with T = 100 ms)."""
    steps = [
        step(0, [1, 2, 3, 4], [1, 2, 9], 40, 600),  # 2 accepted, prefill step
        step(1, [5, 6, 7, 8], [5, 6, 7, 8, 10], 20, 150),  # all 4 accepted + bonus
        step(2, [], [11], 1, 100),  # empty draft
        step(3, [12, 13, 14, 15], [16], 20, 150),  # none accepted
        step(4, [17, 18, 19, 20], [17, 18], 20, 150, cut=True),  # 2 accepted, 2 unverified (length limit)
    ]
    return make_trace("prompt_lookup", steps, 1.4, dtype)


def test_expected_tokens_per_step_known_values():
    assert theory.expected_tokens_per_step(0.8, 4) == pytest.approx((1 - 0.8 ** 5) / 0.2)
    assert theory.expected_tokens_per_step(0.8, 4) == pytest.approx(3.3616)
    assert theory.expected_tokens_per_step(1.0, 4) == 5.0
    assert theory.expected_tokens_per_step(0.0, 7) == 1.0
    with pytest.raises(ValueError):
        theory.expected_tokens_per_step(1.2, 3)


def test_leviathan_expected_speedup_known_values():
    # (1 − α^(γ+1)) / ((1 − α)(γc + 1)) with α = 0.8, γ = 4, c = 0.1
    assert theory.expected_speedup(0.8, 4, 0.1) == pytest.approx(3.3616 / 1.4)
    assert theory.expected_speedup(0.8, 4, 0.0) == pytest.approx(3.3616)  # prompt lookup: free drafts
    assert theory.expected_speedup(0.5, 2, 0.05) == pytest.approx(1.75 / 1.1)


def test_refined_prediction_stages():
    # with v = 1 and nothing else, it is Leviathan's formula
    assert theory.refined_speedup(0.8, 4, 0.1, 1.0) == pytest.approx(theory.expected_speedup(0.8, 4, 0.1))
    # a verification forward costing 2 baseline steps
    assert theory.refined_speedup(0.8, 4, 0.1, 2.0) == pytest.approx(3.3616 / 2.4)
    # half the steps draft nothing (cost 1, one token)
    assert theory.refined_speedup(0.8, 4, 0.1, 2.0, 0.5, 1.0) == pytest.approx((0.5 * 3.3616 + 0.5) / (0.5 * 2.4 + 0.5))
    # Amdahl: 20 % of the time (prefill) not sped up, 2× on the rest
    assert theory.refined_speedup(1.0, 1, 0.0, 1.0, prefill_share=0.2) == pytest.approx(1 / (0.2 + 0.8 / 2))


def test_estimates_from_recorded_traces():
    base, run = baseline_trace(), method_trace()
    assert theory.baseline_step_ms(base) == pytest.approx(100.0)  # first (prefill) step excluded
    est = theory.estimate(run, base)
    assert est.drafted == 14 and est.accepted == 8  # the 2 unverified drafts are excluded
    assert est.judged == 10  # 8 accepted + the first refusal of steps 0 and 3; the 2 discarded after it are not
    assert est.kept_share == pytest.approx(8 / 14)
    assert est.alpha == pytest.approx(8 / 10)
    assert est.gamma == pytest.approx(4.0)  # the empty step is not averaged in
    assert est.empty_fraction == pytest.approx(0.2)
    assert est.tau == pytest.approx(12 / 5)
    assert est.draft_ms_per_token == pytest.approx(60 / 12)  # steady drafting steps 1, 3, 4
    assert est.c == pytest.approx(0.05)
    assert est.v == pytest.approx(1.5)
    assert est.empty_cost == pytest.approx(1.01)
    assert est.prefill_share == pytest.approx(500 / 1400)
    assert est.prefill_ratio == pytest.approx(640 / 500)
    E = theory.expected_tokens_per_step(8 / 10, 4)
    assert est.theoretical_speedup == pytest.approx(E / 1.2)
    assert est.with_verify_cost == pytest.approx(E / (0.2 + 1.5))
    mixed = (0.8 * E + 0.2) / (0.8 * 1.7 + 0.2 * 1.01)
    assert est.with_empty_steps == pytest.approx(mixed)
    f = 500 / 1400
    assert est.refined_speedup == pytest.approx(1 / (f * 640 / 500 + (1 - f) / mixed))
    assert est.expected_tau == pytest.approx(0.8 * E + 0.2)
    # measured: tokens/s ratio
    assert est.measured_speedup == pytest.approx((12 / 1.4) / (10 / 1.4))


def test_alpha_is_the_formulas_alpha_so_independent_acceptance_meets_the_prediction():
    """Drafts accepted independently with probability α = 1/2, γ = 2: a step keeps 0, 1 or 2 drafts with
    chances 1/2, 1/4, 1/4, so four steps keeping 0, 0, 1, 2 are exactly that law. The run's τ must then equal
    E(α, γ) = 1.75 and the gap's "correlated acceptance" factor must be 1: α is accepted / judged drafts
    (3 / 6), not the share kept (3 / 8, which would predict 1.52 tokens per step and call it correlation)."""
    steps = [
        step(0, [1, 2], [9], 10, 100),  # refused at once
        step(1, [3, 4], [9], 10, 100),  # refused at once
        step(2, [5, 6], [5, 9], 10, 100),  # one accepted, then refused
        step(3, [7, 8], [7, 8, 9], 10, 100),  # both accepted + the bonus token
    ]
    run = make_trace("speculative", steps, 0.44)
    est = theory.estimate(run, baseline_trace())
    assert est.alpha == pytest.approx(0.5) and est.kept_share == pytest.approx(3 / 8)
    assert est.tau == pytest.approx(1.75)
    assert est.expected_tau == pytest.approx(est.tau) == pytest.approx(theory.expected_tokens_per_step(0.5, 2))
    fig = {"speedup": 1.2, "theoretical_speedup": est.theoretical_speedup, "tokens_per_step": est.tau,
           "expected_tokens_per_step": est.expected_tau, "acceptance_rate": est.kept_share}
    assert "correlated" not in theory.explain_gap(fig)


def test_acceptance_by_position_on_recorded_trace():
    counts = acceptance_by_position(method_trace().steps)
    # (reached verification, kept, judged): after a refusal the later drafts are discarded, not judged
    assert counts == [(4, 3, 4), (4, 3, 3), (3, 1, 2), (3, 1, 1)]
    assert theory.position_rates(method_trace().steps) == [0.75, 0.75, pytest.approx(1 / 3), pytest.approx(1 / 3)]
    assert theory.conditional_position_rates(method_trace().steps) == [0.75, 1.0, 0.5, 1.0]


def test_other_time_and_setup_enter_the_prediction():
    """A step costs draft + verify + other; set-up counts with the first step as what drafting cannot speed up."""
    base_steps = [step(i, [], [100 + i], 0.0, 450 if i == 0 else 90, other_ms=10) for i in range(10)]
    base = make_trace("baseline", base_steps, 1.5)
    base.setup_ms = 50.0
    run = method_trace()
    run.setup_ms = 60.0
    for s in run.steps:
        s.other_ms = 20.0
    assert theory.baseline_step_ms(base) == pytest.approx(100.0)  # verify + other of a baseline step
    est = theory.estimate(run, base)
    assert est.v == pytest.approx(1.5) and est.o == pytest.approx(0.2)
    E = theory.expected_tokens_per_step(8 / 10, 4)
    assert est.with_verify_cost == pytest.approx(E / (0.2 + 1.5 + 0.2))
    assert est.empty_cost == pytest.approx(1.21)
    assert est.prefill_share == pytest.approx((50 + 460) / (50 + 460 + 9 * 100))
    assert est.prefill_ratio == pytest.approx((60 + 660) / (50 + 460))
    assert any("rest of the loop" in line for line in theory.diagnose(run, base))


def test_nothing_drafted_has_no_prediction():
    steps = [step(i, [], [i + 1], 0.5, 100) for i in range(4)]
    run = make_trace("prompt_lookup", steps, 0.4)
    est = theory.estimate(run, baseline_trace(4))
    assert est.alpha is None and est.theoretical_speedup is None
    assert any("Nothing was drafted" in s for s in theory.diagnose(run, baseline_trace(4)))


def test_first_divergence():
    assert theory.first_divergence([1, 2, 3], [1, 2, 3]) is None
    assert theory.first_divergence([1, 2, 3], [1, 5, 3]) == 1
    assert theory.first_divergence([1, 2], [1, 2, 3]) == 2


def test_diagnose_explains_slower_run():
    base = baseline_trace()
    run = method_trace()
    run.summarize(3.0)  # slower than baseline's 1.4 s for 10 tokens
    lines = theory.diagnose(run, base)
    text = " ".join(lines)
    assert lines[0].startswith("This run was slower than baseline")
    assert "57%" in text  # α
    assert "Leviathan" in text and "refined" not in lines[0]
    assert 2 <= len(lines) <= 8


def test_diagnose_baseline_and_no_baseline():
    assert theory.diagnose(baseline_trace())[0].startswith("Baseline")
    assert theory.diagnose(method_trace())[0].startswith("No baseline run")


def test_diagnose_reports_divergence_by_precision():
    base = baseline_trace(n=12, dtype="bfloat16")
    assert base.output_ids[:3] != method_trace().output_ids[:3]
    bf16 = " ".join(theory.diagnose(method_trace("bfloat16"), base))
    assert "from token 0" in bf16 and "near-tie" in bf16
    fp32 = " ".join(theory.diagnose(method_trace("float32"), baseline_trace(n=12)))
    assert "bug" in fp32


def test_explain_gap():
    holds = {"method": "prompt_lookup", "speedup": 1.9, "theoretical_speedup": 2.0, "with_verify_cost": 1.98,
             "with_empty_steps": 1.98, "refined_speedup": 1.95, "tokens_per_step": 2.0, "expected_tokens_per_step": 2.0}
    assert "their assumptions hold" in theory.explain_gap(holds)
    cancel = dict(holds, with_verify_cost=1.4, with_empty_steps=1.4, refined_speedup=1.4, tokens_per_step=2.8)
    text = theory.explain_gap(cancel)
    assert "factors that cancel" in text and "(×0.70)" in text and "τ = 2.80 measured vs 2.00" in text
    far = {"method": "universal", "speedup": 0.5, "theoretical_speedup": 2.0, "with_verify_cost": 1.2,
           "with_empty_steps": 1.1, "refined_speedup": 1.0, "verify_cost": 2.0, "empty_draft_fraction": 0.1,
           "prefill_share": 0.2, "prefill_ratio": 1.0, "tokens_per_step": 1.5, "expected_tokens_per_step": 2.0,
           "c": 0.4, "gamma": 3}
    text = theory.explain_gap(far)
    assert text.startswith("Measured 0.50× vs Leviathan et al.'s 2.00× (-75%)")
    assert "verifying and the loop around it cost 2.00 baseline steps, not 1 (×0.60)" in text  # largest factor first
    assert text.index("×0.60") < text.index("×0.75")
    assert "τ = 1.50 measured vs 2.00 expected from α and γ (×0.75)" in text
    assert "timing noise (every phase of the run is already counted above) (×0.67)" in text  # 0.5 / (1.0 × 0.75)
    assert "not cheap enough" in text
