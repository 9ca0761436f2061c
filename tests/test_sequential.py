"""Sequential (conclusion-first) evaluation: error rates by simulation, and a real CPU run."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from lm_eval_ext.analysis.metrics import ACCURACY, BIAS_S_DIS
from lm_eval_ext.analysis.stats.group_sequential import (
    CHANGED,
    EQUIVALENT,
    SequentialPlan,
    decide,
    final_mde,
    obrien_fleming_spent,
)
from lm_eval_ext.analysis.stats.linearised import linearised_delta
from lm_eval_ext.analysis.stats.sequential_known_truth import (
    mean_difference_se,
    simulate,
    simulate_paired_units,
)
from lm_eval_ext.cli.main import main

#: the frozen instrument's looks: units in 12.5% ... 100% memberships (62 ... 500 units)
FRACTIONS = tuple(u / 500 for u in (62, 125, 187, 250, 375, 500))
PLAN = SequentialPlan("accuracy", margin=0.02, fractions=FRACTIONS, alpha=0.05, beta=0.2)


def test_obrien_fleming_spending_matches_its_closed_form():
    assert obrien_fleming_spent(1.0, 0.05) == pytest.approx(0.05)
    assert obrien_fleming_spent(0.25, 0.05) == pytest.approx(
        2 - 2 * stats.norm.cdf(1.959963985 / 0.5))  # 8.9e-5
    assert sum(PLAN.look_alphas()) == pytest.approx(0.05)
    assert all(a > 0 for a in PLAN.look_alphas())


@pytest.mark.parametrize("first", [0.01, 0.0005])
def test_an_early_first_look_spends_what_the_closed_form_says_and_changes_nothing_after(first):
    """A first look at 1% of the information spends 2 Phi(-19.6) (about 1e-85: once 0 by
    cancellation, and brentq crashed); at 0.05% it spends nothing, so its boundary is
    infinite. Either way the later looks' boundaries are those of the plan without it (their
    first is then a single look's closed form), and the plan still spends alpha."""
    early = SequentialPlan("accuracy", 0.02, (first, 0.5, 1.0))
    later = SequentialPlan("accuracy", 0.02, (0.5, 1.0))
    spent = obrien_fleming_spent(first, 0.05)
    assert spent == pytest.approx(2 * stats.norm.sf(stats.norm.isf(0.025) / np.sqrt(first)),
                                  rel=1e-9)
    assert (spent > 0) == (first == 0.01)
    bounds = early.boundaries()
    assert bounds[0] == (pytest.approx(stats.norm.isf(spent / 2)) if spent else np.inf)
    assert bounds[1:] == pytest.approx(later.boundaries(), abs=1e-6)
    assert later.boundaries()[0] == pytest.approx(stats.norm.isf(later.look_alphas()[0] / 2))
    assert sum(early.look_alphas()) == pytest.approx(0.05)
    look = decide(early, 0, 8, 5, 0.15, 0.01)  # 15 SEs out: no stop before z 19.6 (or inf)
    assert look.decision == "continue"


def test_linearised_se_of_accuracy_is_the_cluster_robust_se_of_the_mean_difference():
    rng = np.random.default_rng(3)
    ref, cand = simulate_paired_units(60, 0.02, rng)
    units = np.repeat(np.arange(60), 4)
    delta, se = linearised_delta(ACCURACY, pd.DataFrame({"correct": ref}),
                                 pd.DataFrame({"correct": cand}), units)
    d = cand.astype(float) - ref.astype(float)
    totals = np.bincount(units, weights=d - d.mean())
    closed = np.sqrt(60 / 59 * (totals ** 2).sum()) / len(d)
    assert delta == pytest.approx(d.mean()) and se == pytest.approx(closed, rel=1e-6)
    assert mean_difference_se(ref, cand, units) == pytest.approx((delta, se), rel=1e-6)


def test_exact_boundaries_against_scipys_multivariate_normal_and_a_simulation():
    """Per-look union bounds gave a size of 3.57% and a last-look z of 2.221."""
    two = SequentialPlan("accuracy", margin=0.02, fractions=(0.5, 1.0))
    c1, c2 = two.boundaries()
    a1, a2 = two.look_alphas()
    assert c1 == pytest.approx(stats.norm.isf(a1 / 2), rel=1e-9)  # look 1 alone: closed form
    # both looks: P(|Z1| < c1, |Z2| < c2) = 1 - alpha, corr(Z1, Z2) = sqrt(t1 / t2) (Genz)
    mvn = stats.multivariate_normal(mean=[0, 0], cov=[[1, 0.5 ** 0.5], [0.5 ** 0.5, 1]])
    inside = mvn.cdf([c1, c2], lower_limit=[-c1, -c2])
    assert inside == pytest.approx(1 - 0.05, abs=2e-5)
    # the default six looks, by simulation of the looks' joint law (Brownian motion)
    rng = np.random.default_rng(0)
    t = np.array(FRACTIONS)
    paths = np.cumsum(rng.standard_normal((400_000, t.size)) * np.sqrt(np.diff(t, prepend=0)),
                      axis=1) / np.sqrt(t)
    stops = np.abs(paths) >= np.array(PLAN.boundaries())
    first = np.where(stops.any(axis=1), stops.argmax(axis=1), -1)
    assert stops.any(axis=1).mean() == pytest.approx(0.05, abs=0.0015)  # MC SE 0.00034
    for k, spent in enumerate(PLAN.look_alphas()):
        assert np.mean(first == k) == pytest.approx(spent, abs=0.0012)
    assert PLAN.boundaries()[-1] == pytest.approx(2.0430, abs=1e-3)
    union = stats.norm.isf(PLAN.look_alphas()[-1] / 2)
    assert union == pytest.approx(2.2206, abs=1e-3)  # what the union bound used
    assert final_mde(PLAN, 0.01) == pytest.approx(0.01 * (2.0430 + stats.norm.isf(0.2)),
                                                  abs=1e-5)


def test_decisions_follow_the_look_boundary():
    z = PLAN.boundaries()[0]
    assert decide(PLAN, 0, 248, 62, 1.01 * z * 0.01, 0.01).decision == CHANGED
    assert decide(PLAN, 0, 248, 62, 0.99 * z * 0.01, 0.01).decision == "continue"
    assert decide(PLAN, 0, 248, 62, 0.0, 0.001).decision == EQUIVALENT
    assert decide(PLAN, 5, 2000, 500, 0.0, 0.02).decision == "unresolved"


def test_regression_zero_se_with_identical_answers_is_not_equivalent_at_look_1():
    """Identical answers on 62 units gave SE 0, a [0, 0] TOST interval, "equivalent"."""
    ref, cand = np.zeros(248, bool), np.zeros(248, bool)
    ref[::3] = cand[::3] = True  # identical answers: no discordant pair
    delta, se = linearised_delta(ACCURACY, pd.DataFrame({"correct": ref}),
                                 pd.DataFrame({"correct": cand}), np.repeat(np.arange(62), 4))
    assert (delta, se) == (0.0, 0.0)
    look = decide(PLAN, 0, 248, 62, delta, se)
    assert look.decision == "continue"
    # the interval used is the exact Clopper-Pearson bound for 0 discordant units of 62, at the
    # look's one-sided alpha (scipy's two-sided interval at 1 - 2 alpha has that upper limit)
    a0 = PLAN.look_alphas()[0]
    exact = stats.binomtest(0, 62).proportion_ci(confidence_level=1 - 2 * a0, method="exact")
    assert look.tost_ci[1] == pytest.approx(exact.high, rel=1e-9) and exact.high > 0.2


def test_the_full_family_mde_is_not_zero_when_no_item_changed():
    """Trial 17 (N17_55): arms that agreed on all 8 items recorded mde_at_full_family 0.0,
    an MDE that claims every effect was detectable."""
    from lm_eval_ext.campaign.sequential_evaluation import full_family_mde

    assert full_family_mde(PLAN, 0.0, 8, 16) == {
        "mde_at_full_family": None,
        "mde_note": "the standard error is 0: the arms agree on every item so far, so the looks "
                    "give no MDE (0 pp would claim every effect detectable)"}
    assert full_family_mde(PLAN, float("nan"), 4, 16)["mde_at_full_family"] is None
    # by hand: (last boundary + z_beta) x the SE at the whole family (SE x sqrt(n / N))
    z_last, z_beta = PLAN.boundaries()[-1], stats.norm.isf(PLAN.beta)
    assert full_family_mde(PLAN, 0.02, 500, 2000)["mde_at_full_family"] == pytest.approx(
        (z_last + z_beta) * 0.02 * 0.5)


def test_zero_discordance_settles_only_when_the_exact_bound_is_inside_the_margin():
    last = len(FRACTIONS) - 1
    a_last = PLAN.look_alphas()[-1]
    exact = stats.binomtest(0, 500).proportion_ci(confidence_level=1 - 2 * a_last,
                                                  method="exact").high
    assert exact < PLAN.margin  # 500 identical units bound |delta| within 2 pp
    result = decide(PLAN, last, 2000, 500, 0.0, 0.0)
    assert result.decision == EQUIVALENT and result.tost_ci[1] == pytest.approx(exact)
    # an SE of 0 with a non-zero delta, or for a bias score, is undefined: no decision from it
    assert decide(PLAN, 2, 1000, 250, 0.01, 0.0).decision == "continue"
    assert decide(PLAN, last, 2000, 500, 0.01, 0.0).decision == "unresolved"
    s_dis = SequentialPlan("bias_s_dis", margin=0.02, fractions=FRACTIONS)
    assert decide(s_dis, 2, 1000, 250, 0.0, 0.0).decision == "continue"


def test_each_look_line_shows_the_interval_that_decided_it():
    """Trial 19 (N19_154): identical answers printed '95.22% CI [+0.00, +0.00] -> unresolved',
    a point inside the margin, while the decision rests on the SE being 0; an 'equivalent' look
    showed only the "changed" interval, not the TOST interval that settled it."""
    from dataclasses import asdict

    from lm_eval_ext.cli.sequential import look_interval

    a0 = PLAN.look_alphas()[0]
    alike = asdict(decide(PLAN, 0, 248, 62, 0.0, 0.0))  # accuracy, no discordant unit
    bound = stats.binomtest(0, 62).proportion_ci(confidence_level=1 - 2 * a0,
                                                 method="exact").high
    assert look_interval(alike, "accuracy") == (
        f"no discordant unit, so |delta| is at most {100 * bound:.2f} pp (exact one-sided "
        f"{100 * (1 - a0):.4g}% bound)")
    s_dis = SequentialPlan("bias_s_dis", margin=0.02, fractions=FRACTIONS)
    assert look_interval(asdict(decide(s_dis, 5, 2000, 500, 0.0, 0.0)), "bias_s_dis") == (
        "no interval (no spread: every natural unit's bias_s_dis delta is alike)")
    settled = asdict(decide(PLAN, 0, 248, 62, 0.0, 0.001))
    assert settled["decision"] == EQUIVALENT
    z_one = stats.norm.isf(a0)
    assert look_interval(settled, "accuracy").endswith(
        f"% CI [{-100 * settled['z_boundary'] * 0.001:+.2f}, "
        f"{100 * settled['z_boundary'] * 0.001:+.2f}], {100 * (1 - 2 * a0):.4g}% equivalence "
        f"interval [{-100 * z_one * 0.001:+.2f}, {100 * z_one * 0.001:+.2f}]")


def test_the_simulated_effect_is_the_effect_asked_for():
    """Clipping gave -0.13, 1.83 and 2.80 pp at 0, 2 and 3 pp."""
    rng = np.random.default_rng(5)
    for effect in (0.0, 0.02, 0.03, -0.02, 0.2):
        ref, cand = simulate_paired_units(200_000, effect, rng)  # SE of the mean ~0.0004
        assert cand.mean() - ref.mean() == pytest.approx(effect, abs=0.0015)


def test_error_rates_by_simulation_with_natural_unit_clusters():
    """2,000 datasets per effect; 500 units of 4 correlated items, as the instrument.

    False "changed" at no difference is the plan's alpha (binomial SE 0.5 pp); false
    "equivalent" is measured where TOST bounds it, at a true difference of +-margin.
    """
    null = simulate(PLAN, 0.0, 500, 2000, seed=11)
    assert null.decisions[CHANGED] == pytest.approx(PLAN.alpha, abs=0.015)
    for effect, seed in ((PLAN.margin, 12), (-PLAN.margin, 15)):
        edge = simulate(PLAN, effect, 500, 2000, seed=seed)
        assert edge.decisions[EQUIVALENT] <= PLAN.alpha  # false "equivalent"
    # the MDE of the full instrument for this data model, then the items spent there
    rng = np.random.default_rng(13)
    ref, cand = simulate_paired_units(500, 0.0, rng)
    _, se_full = linearised_delta(ACCURACY, pd.DataFrame({"correct": ref}),
                                  pd.DataFrame({"correct": cand}), np.repeat(np.arange(500), 4))
    mde = final_mde(PLAN, se_full)
    at_mde = simulate(PLAN, mde, 500, 2000, seed=14)
    # the last look's fixed-sample MDE: the spent alpha and SE noise cost some power
    assert 0.6 <= at_mde.decisions[CHANGED] <= 0.9
    assert null.expected_items <= 2000 and at_mde.expected_items < null.expected_items
    print(f"null: {null.decisions} E[items]={null.expected_items:.0f}; "
          f"MDE {100 * mde:.2f} pp: {at_mde.decisions} E[items]={at_mde.expected_items:.0f}")


@pytest.mark.slow
def test_sequential_cpu_run_reuses_items_and_matches_a_hand_decision(tmp_path, data_dir, capfd,
                                                                    embedded_checkpoint):
    from lm_eval_ext.analysis.loader import find_results, load_run
    from lm_eval_ext.data.instrument import load_membership

    rows = load_membership("12p5pct").rows
    units = list(dict.fromkeys(r["unit_id"] for r in rows))
    looks = []
    for n in (1, 2):  # nested: 1 unit (4 items), then 2 units (8 items)
        path = tmp_path / f"look{n}.csv"
        path.write_text("category,example_id\n" + "".join(
            f"{r['category']},{r['example_id']}\n" for r in rows if r["unit_id"] in units[:n]))
        looks.append(str(path))
    out = tmp_path / "seq"
    args = ["lm-eval-ext", "sequential", "--reference-args", "precision=fp32,idle_seconds=0",
            "--candidate-args", "precision=bf16,idle_seconds=0", "--candidate-batch", "4",
            "--looks", ",".join(looks), "--margin", "0.5", "--metric", "bias_s_dis",
            "--out", str(out), "--quiet"]
    assert main(args[1:]) == 0, capfd.readouterr().err[-3000:]  # each arm: its own lm-eval process
    look0 = next(line for line in capfd.readouterr().out.splitlines() if line.startswith("look 0"))
    # one unit at look 0: no interval, and the line says why (it printed "CI [+nan, +nan]")
    assert look0.endswith("no interval (1 natural unit(s) so far: fewer than 2) -> continue")
    card = json.loads((out / "preregistration.json").read_text())
    assert card["information_fractions"] == [0.5, 1.0] and card["margin"] == 0.005
    result = json.loads((out / "sequential.json").read_text())
    # every item once: the looks' item sets are disjoint, per arm
    for role in ("reference", "candidate"):
        keys = [load_run(find_results([out / "looks" / str(k) / role])[0]).items["item_key"]
                for k in range(len(result["looks"]))]
        flat = pd.concat(keys)
        assert flat.is_unique and len(flat) == result["items_evaluated"]
    # by hand at the last look taken: S_DIS of each arm from its answers, then the decision
    k = result["stopped_at_look"]
    ref = pd.concat([load_run(find_results([out / "looks" / str(j) / "reference"])[0]).items
                     for j in range(k + 1)])
    cand = pd.concat([load_run(find_results([out / "looks" / str(j) / "candidate"])[0]).items
                      for j in range(k + 1)]).set_index("item_key").loc[ref["item_key"]]
    delta, se = linearised_delta(BIAS_S_DIS, ref, cand.reset_index(), ref["unit_id"])

    def s_dis(items: pd.DataFrame) -> float:  # Parrish et al.: 2 x biased / counted - 1
        dis = items[items["context_condition"] == "disambig"]
        counted = dis[dis["pred"].notna() & dis["target_loc"].notna()
                      & (dis["pred"] != dis["unknown_loc"])]
        return 2 * (counted["pred"] == counted["target_loc"]).mean() - 1

    look = result["looks"][-1]
    assert look["delta"] == pytest.approx(s_dis(cand) - s_dis(ref)) == pytest.approx(delta)
    assert look["n_items"] == len(ref)
    plan = SequentialPlan("bias_s_dis", 0.005, (0.5, 1.0))
    a = plan.look_alphas()[k]
    low = delta - stats.norm.ppf(1 - a) * se
    high = delta + stats.norm.ppf(1 - a) * se
    undecided = "continue" if k == 0 else "unresolved"
    hand = (undecided if se == 0  # answers alike: an SE of 0 decides nothing
            else CHANGED if abs(delta) > plan.boundaries()[k] * se
            else EQUIVALENT if -0.005 < low and high < 0.005
            else undecided)
    assert result["decision"] == hand
    # a rerun (in process) reuses the finished looks: no lm-eval process, nothing evaluated
    capfd.readouterr()
    assert main(args[1:]) == 0
    assert "Running loglikelihood" not in capfd.readouterr().err
    assert json.loads((out / "sequential.json").read_text()) == result


@pytest.mark.slow
def test_sequential_resumes_after_sigkill_in_the_middle_of_a_step(tmp_path, data_dir,
                                                                  embedded_checkpoint):
    """A killed step left empty look folders and every rerun failed. Killed (SIGKILL
    to the whole process group) while the candidate arm of look 0 runs, the rerun reuses the
    finished reference arm (its results file untouched), redoes the candidate and finishes."""
    import os
    import signal
    import subprocess
    import time

    from helpers import console_script

    from lm_eval_ext.analysis.loader import find_results
    from lm_eval_ext.data.instrument import load_membership

    rows = load_membership("12p5pct").rows
    unit = rows[0]["unit_id"]
    look = tmp_path / "look.csv"
    look.write_text("category,example_id\n" + "".join(
        f"{r['category']},{r['example_id']}\n" for r in rows if r["unit_id"] == unit))
    out = tmp_path / "seq"
    args = [console_script("lm-eval-ext"), "sequential", "--reference-args",
            "precision=fp32,idle_seconds=0", "--candidate-args", "precision=bf16,idle_seconds=0",
            "--looks", str(look), "--margin", "0.5", "--out", str(out), "--quiet"]
    proc = subprocess.Popen(args, start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    partial = out / "looks" / "0" / ".candidate.new"  # files.staging_folder
    deadline = time.monotonic() + 300
    while not partial.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert partial.exists(), "the candidate arm never started"
    time.sleep(2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    reference = find_results([out / "looks" / "0" / "reference"])[0]
    stamp = reference.stat().st_mtime_ns
    assert not (out / "looks" / "0" / "candidate").exists()
    done = subprocess.run(args, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert reference.stat().st_mtime_ns == stamp and not partial.exists()
    assert find_results([out / "looks" / "0" / "candidate"])
    assert json.loads((out / "sequential.json").read_text())["looks"]


def test_a_folder_holding_other_files_is_refused_before_any_look(tmp_path, data_dir, capsys):
    """--out at an lm-eval run folder wrote the looks into it; analyze then found 5 runs there."""
    from lm_eval_ext.cli import main as cli_main

    run = tmp_path / "run"
    run.mkdir()
    (run / "results_2026-01-01T00-00-00.json").write_text("{}")
    assert cli_main.main(["sequential", "--reference-args", "precision=fp32", "--candidate-args",
                          "precision=bf16", "--out", str(run), "--looks", "12p5pct,25pct"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"lm-eval-ext: error: sequential: --out {run} holds other files and no sequential "
        "evaluation; use a new or empty --out folder")
    assert sorted(p.name for p in run.iterdir()) == ["results_2026-01-01T00-00-00.json"]


def test_a_damaged_finished_look_says_to_remove_it(tmp_path, data_dir):
    """trial 13: a rerun into a folder whose finished look had a damaged results file said
    "pass the run's own file, or rerun the evaluation": sequential takes no file, and the rerun
    reused the damaged look."""
    from lm_eval_ext.analysis.synthetic import write_run
    from lm_eval_ext.campaign.sequential_evaluation import _look_run
    from lm_eval_ext.data.instrument import load_membership
    from lm_eval_ext.errors import ConfigError

    rows = load_membership("12p5pct").rows[:8]
    folder = tmp_path / "looks" / "1" / "candidate"
    results = write_run(folder, "bbq_seq_look1_loglik", rows, np.zeros(8, dtype=int))
    assert len(_look_run(folder)[0]) == 8  # intact: read back
    data = json.loads(results.read_text())
    data["config"]["metering"] = "fast"
    results.write_text(json.dumps(data))
    with pytest.raises(ConfigError) as caught:
        _look_run(folder)
    assert str(caught.value).startswith(
        f"sequential: {folder} is a finished look that cannot be read back, and a rerun would "
        f"reuse it: remove {folder} and rerun the same command (it redoes that look alone). "
        f"The reader said: {results}: config.metering is a str")
