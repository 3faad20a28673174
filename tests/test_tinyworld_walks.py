"""The tiny world's walk family (balagg.tinyworld.walks): the task, its warm-start data, its datasets and
benchmarks through the real loaders, and the family checks of the warm start and the workflow."""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

from balagg.tinyworld import walks
from balagg.tinyworld.model import ALPHABET
from balagg.tinyworld.raw import WALK_BENCHMARKS, bench_size, read_rows, write_raw
from balagg.tinyworld.regimes import get_regime, length_profile, regime_examples

REPO = Path(__file__).resolve().parents[1]
STEP = re.compile(r"(\d+)\+(\d+)=(\d+)\.")
PROBLEM = re.compile(r"^Walk (\d+) by (\d+)\.$")


def steps_of(text: str) -> list[tuple[int, int, int]]:
    return [tuple(map(int, s)) for s in STEP.findall(text)]


@pytest.mark.parametrize(("mod", "lattice", "count"), [(20, 2, 37), (40, 2, 83), (80, 4, 83)])
def test_right_walks_stay_on_the_lattice_and_end_at_zero_within_five_steps_with_the_count_boxed(mod, lattice, count):
    problems = walks.walk_problems(mod, lattice)
    assert len(problems) == len(set(problems)) == count
    for w in problems:
        steps = steps_of(w.solution)
        assert len(steps) == w.answer <= walks.MAX_STEPS and steps[0][0] == w.start and steps[-1][2] == 0
        assert all((a + b) % mod == c and c % lattice == 0 and b == w.step for a, b, c in steps)
        assert all(c == a2 for (_, _, c), (a2, _, _) in zip(steps, steps[1:]))
        assert w.solution.endswith(f"\\boxed{{{w.answer}}}")
    for bad_mod, bad_lattice in ((21, 2), (2, 2), (42, 4), (40, 1)):
        with pytest.raises(ValueError, match="multiple of the lattice"):
            walks.walk_problems(bad_mod, bad_lattice)


def test_the_lattice_of_four_mod_80_is_the_even_walk_world_mod_40_doubled():
    doubled = [(2 * w.start, 2 * w.step, w.answer) for w in walks.walk_problems(40)]
    assert [(w.start, w.step, w.answer) for w in walks.walk_problems(80, 4)] == doubled


def test_a_stopped_walk_on_the_lattice_of_four_ends_at_its_off_lattice_near_miss():
    rng, slips, ends = random.Random(0), (-10, -2, -1, 1, 2, 10), set()
    for w in walks.walk_problems(80, 4) * 3:
        steps = steps_of(walks.flawed_walk(w, rng, "stop", slips))
        assert all((a + b) % 80 == c for a, b, c in steps[:-1]) and steps[-1][2] % 4 != 0
        last = steps[-1]
        ends.add(((last[2] - last[0] - last[1]) % 80))
    assert ends == {s % 80 for s in slips}  # every near miss is drawn


@pytest.mark.parametrize("mod", [20, 40])
def test_a_wrong_walk_slips_to_an_odd_value_once_and_then_follows_the_rule_to_the_limit(mod):
    rng = random.Random(0)
    for w in walks.walk_problems(mod) * 3:
        text = walks.flawed_walk(w, rng)
        assert len(text) == walks.LOOP_CHARS and "boxed" not in text
        steps = steps_of(text)
        slips = [k for k, (a, b, c) in enumerate(steps) if (a + b) % mod != c]
        assert len(slips) == 1 and steps[slips[0]][2] % 2 == 1  # one near miss, odd
        assert all(c != 0 for _, _, c in steps[slips[0]:])  # the odd residues never reach 0
        assert all(c == a2 for (_, _, c), (a2, _, _) in zip(steps, steps[1:]))


def test_the_walk_regime_warm_starts_on_walks_of_the_walk_world():
    regime = get_regime("wrong-long-walk")
    assert regime.family == "walks" and get_regime("spread").family == "chains"
    examples = regime_examples(regime, 0, 2000)
    space = {w.problem: w for w in walks.walk_problems()}
    wrong = [e for e in examples if not e.correct]
    assert 0.35 < len(wrong) / len(examples) < 0.45  # p_wrong 0.4
    for e in examples:
        w = space[e.prompt]  # every prompt is a walk problem at the world's modulus
        if e.correct:
            assert e.completion == w.solution and e.ends
        else:
            assert not e.ends and "boxed" not in e.completion
    assert len({e.prompt for e in examples}) == len(space)


@pytest.mark.parametrize("mod", [20, 40])
def test_a_stopped_walk_ends_at_its_odd_slip_after_the_same_draws_as_a_walk_that_goes_on(mod):
    going, stopping = random.Random(7), random.Random(7)
    for w in walks.walk_problems(mod) * 3:
        on, stopped = walks.flawed_walk(w, going), walks.flawed_walk(w, stopping, after_slip="stop")
        steps = steps_of(stopped)
        assert "boxed" not in stopped and stopped == " ".join(f"{a}+{b}={c}." for a, b, c in steps)
        assert all((a + b) % mod == c for a, b, c in steps[:-1]) and steps[-1][2] % 2 == 1  # the slip ends it
        assert len(steps) <= w.n_steps and on.startswith(stopped)  # the same slip, then nothing
    assert going.random() == stopping.random()  # both styles drew the same
    with pytest.raises(ValueError, match="unknown after_slip"):
        walks.flawed_walk(walks.walk_problems(mod)[0], going, after_slip="loop")


def test_the_lattice_mirror_warm_starts_on_its_worlds_walks_and_every_flawed_one_stops_off_the_lattice():
    regime, world = get_regime("right-long-walk4"), walks.WORLDS["walks4"]
    assert regime.family == "walks4" and world.mod == 80 and world.lattice == 4
    examples = regime_examples(regime, 0, 4000)
    space = {w.problem: w for w in world.problems}
    flawed = [e for e in examples if not e.correct]
    assert abs(len(flawed) / len(examples) - regime.p_wrong) < 0.03
    for example in examples:
        w = space[example.prompt]
        if example.correct:
            assert example.completion == w.solution
        else:
            steps = steps_of(example.completion)
            assert example.ends and "boxed" not in example.completion
            assert all(c % 4 == 0 for _, _, c in steps[:-1]) and steps[-1][2] % 4 != 0
    with pytest.raises(ValueError, match="must all leave the lattice"):
        walks.WalkWorld(80, 4, (-4, 1))


def test_the_walk_regimes_put_the_length_on_opposite_sides():
    right_long, wrong_long = length_profile(get_regime("right-long-walk4")), length_profile(get_regime("wrong-long-walk"))
    assert right_long["wrong_mean"] < 0.6 * right_long["right_mean"] and right_long["wrong_unended_share"] == 0
    assert wrong_long["wrong_mean"] > 3 * wrong_long["right_mean"] and wrong_long["wrong_unended_share"] == 1


@pytest.fixture(scope="module")
def walk_raw(tmp_path_factory):
    out = tmp_path_factory.mktemp("walk-raw")
    return out, write_raw(out, seed=3, train_problems=200, bench_problems=16, family="walks")


@pytest.mark.parametrize("family", ["walks", "walks4"])
def test_walk_datasets_and_benchmarks_read_through_the_real_loaders(family, walk_raw, tmp_path):
    from balagg.data import prepare

    out, manifest = walk_raw
    if family != "walks":
        out = tmp_path / "raw"
        manifest = write_raw(out, seed=3, train_problems=200, bench_problems=16, family=family)
    world = walks.WORLDS[family]
    assert manifest["family"] == family and manifest["tasks"]["walk"]["problems"] == 83
    assert (manifest["tasks"]["walk"]["mod"], manifest["tasks"]["walk"]["lattice"]) == (world.mod, world.lattice)
    benchmark_problems = {}
    for name, entry in manifest["datasets"].items():
        report = prepare(name, out / name, tmp_path / f"{name}.jsonl", role=entry["role"])
        assert entry["rows"] == (83 if entry["role"] == "train" else 16)  # 200 asked: the space has 83
        assert report.written == entry["rows"] and report.skipped == 0 and report.filtered == 0
        if name == "livecodebench":
            continue  # the code benchmark is the same in every family
        records = [json.loads(line) for line in (tmp_path / f"{name}.jsonl").read_text().splitlines()]
        for record in records:
            start, step = map(int, PROBLEM.match(record["problem"]).groups())
            gold = record["answer"][0] if name == "olympiadbench" else record["answer"]
            assert start % world.lattice == step % world.lattice == 0
            assert gold == str(walks.Walk(start, step, world.mod).answer)
        problems = [r["problem"] for r in records]
        if name in WALK_BENCHMARKS:
            assert len(set(problems)) == len(problems) == 16
            benchmark_problems[name] = set(problems)
        else:  # a training set: every problem of the space, once
            assert len(set(problems)) == len(problems) == 83
    union = set().union(*benchmark_problems.values())
    assert len(union) == 5 * 16  # the benchmarks' problems are disjoint


def test_walk_rows_are_deterministic_and_in_the_tokenizer_alphabet(walk_raw, tmp_path):
    out, manifest = walk_raw
    again = write_raw(tmp_path / "again", seed=3, train_problems=200, bench_problems=16, family="walks")
    chains = write_raw(tmp_path / "chains", seed=3, train_problems=200, bench_problems=16)
    for name, entry in manifest["datasets"].items():
        assert again["datasets"][name]["sha256"] == entry["sha256"]
        same_in_both = name == "livecodebench"
        assert (chains["datasets"][name]["sha256"] == entry["sha256"]) == same_in_both, name
    text = json.dumps([read_rows(out / e["path"]) for n, e in manifest["datasets"].items() if n != "livecodebench"])
    assert set(text) <= set(ALPHABET)
    with pytest.raises(ValueError, match="unknown tiny-world family"):
        write_raw(tmp_path / "bad", seed=0, family="graphs")


def test_a_warm_start_of_another_family_is_refused_before_any_work(walk_raw, tmp_path):
    from balagg.tinyworld.warmstart import WarmStartConfig, build_warm_model

    out, _ = walk_raw
    with pytest.raises(ValueError, match=r"manifest.json: the tiny world's family is 'walks'.*'chains'"):
        build_warm_model("tiny-xs", out, tmp_path / "model", config=WarmStartConfig(steps=1, regime="spread"))
    assert not (tmp_path / "model").exists()


def test_benchmarks_asking_for_more_than_disjoint_slices_hold_get_as_many_as_they_hold(tmp_path):
    manifest = write_raw(tmp_path / "raw", seed=0, train_problems=2000, bench_problems=48, family="walks")
    problems = {name: [r.get("problem") or r["question"] for r in read_rows(tmp_path / "raw" / manifest["datasets"][name]["path"])]
                for name in WALK_BENCHMARKS}
    assert [len(p) for p in problems.values()] == [83 // 5] * 5  # 16 each, not 48 with repeats
    assert len(set().union(*map(set, problems.values()))) == 5 * 16
    assert manifest["datasets"]["dapo-math-17k"]["rows"] == 83
    benchmarks = {name: spec["rows"] for name, spec in manifest["datasets"].items() if spec["role"] != "train"}
    assert benchmarks == {name: bench_size("walks", name, 48) for name in benchmarks}  # what `balagg plan` counts
    assert bench_size("chains", "math500", 48) == 48
    small = write_raw(tmp_path / "small", seed=0, bench_problems=16, family="walks", names=("math500",))
    assert small["datasets"]["math500"]["sha256"] == manifest["datasets"]["math500"]["sha256"]
    with pytest.raises(ValueError, match="slice 5 of 5"):
        walks.dealt_walks(0, 5, 5, 16)


def dry_run(config: dict, tmp_path: Path) -> subprocess.CompletedProcess:
    path = tmp_path / "config.yaml"
    path.write_text(json.dumps(config))
    return subprocess.run([sys.executable, "-m", "snakemake", "-n", "--configfile", str(path)],
                          capture_output=True, text=True, timeout=300, cwd=REPO)


def jobs_of(plan: str) -> list[dict[str, str]]:
    """The dry run's jobs: rule, input, output and wildcards of each."""
    jobs = []
    for block in re.split(r"\n(?=rule |localrule )", plan):
        head = re.match(r"(?:local)?rule (\w+):", block)
        if head:
            fields = dict(re.findall(r"^\s+(input|output|wildcards): (.*)$", block, re.M))
            jobs.append({"rule": head.group(1), **fields})
    return jobs


def smoke_with_a_walk_model(lattice_walker: bool = False) -> dict:
    import yaml

    config = yaml.safe_load((REPO / "configs/smoke.yaml").read_text())
    config["campaign"] = "families"
    config["models"]["walker"] = {"path": "tinyworld", "tinyworld_size": "tiny-xs",
                                  "tinyworld_regime": "wrong-long-walk", "math_template": "{problem}"}
    if lattice_walker:
        config["models"]["walker4"] = {**config["models"]["walker"], "tinyworld_regime": "right-long-walk4"}
    return config


def test_one_campaign_trains_and_evaluates_each_model_on_its_familys_files(tmp_path):
    result = dry_run(smoke_with_a_walk_model(lattice_walker=True), tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    jobs = jobs_of(result.stdout)
    root = "results/families"

    def job(rule, model, **wildcards):
        def has(job, key, value):
            return f"{key}={value}" in job.get("wildcards", "").split(", ")

        found = [j for j in jobs if j["rule"] == rule and has(j, "model", model)
                 and all(has(j, k, v) for k, v in wildcards.items())]
        assert found, (rule, model)
        return found[0]

    for model, family in (("tiny-s", None), ("walker", "walks"), ("walker4", "walks4")):
        data = f"{root}/data/{family}" if family else f"{root}/data"
        raw = f"{root}/tinyworld/{family}/raw" if family else f"{root}/tinyworld/raw"
        assert job("tinyworld_model", model)["input"] == f"{raw}/manifest.json"
        assert f"{data}/train/arith-long.jsonl" in job("train", model, aggregator="token-agg")["input"].split(", ")
        evaluation = job("generate", model, run="initial")["input"].split(", ")
        assert [p for p in evaluation if "/bench/" in p] == [
            f"{data}/bench/{name}.jsonl" for name in smoke_with_a_walk_model()["benchmarks"]]
    assert {j["rule"] for j in jobs} >= {"tinyworld_data", "tinyworld_data_family", "prepare_data_family"}
    walk_data = sorted(j["output"] for j in jobs if j["rule"] == "tinyworld_data_family")
    assert walk_data == [f"{root}/tinyworld/{family}/raw/manifest.json" for family in ("walks", "walks4")]
    card = next(j for j in jobs if j["rule"] == "tinyworld_card")["input"].split(", ")
    assert {f"{root}/data/{family}train/arith-long.report.json" for family in ("", "walks/", "walks4/")} <= set(card)


def test_a_walk_model_with_a_real_benchmark_is_refused_in_one_line(tmp_path):
    config = smoke_with_a_walk_model()
    config["benchmarks"]["math500"] = "HuggingFaceH4/MATH-500"
    result = dry_run(config, tmp_path)
    assert result.returncode != 0
    assert re.search(r"config: models\.walker: its walks benchmarks must all come from the tiny world .*"
                     r"math500: HuggingFaceH4/MATH-500", result.stdout + result.stderr)
