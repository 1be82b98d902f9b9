"""Multi-process training: two local processes joined by `jax.distributed` equal one process.

The README's multi-host recipe, run on one machine: two `python -m experiments train
--distributed` processes (a localhost coordinator, CPU collectives over gloo), each with 2
simulated CPU devices, train on a `data=2,fsdp=2` mesh that spans both. Their loss curve and
final parameters must equal a single-process run on the same global mesh shape (atol 1e-5),
and the checkpoint the pair wrote must restore in one process (params alone, and params with
optimizer state to resume the run there).
"""

import dataclasses
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time

import jax
import numpy as np
import pytest

from experiments import train
from experiments.train import checkpoint

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
PROCESSES, LOCAL_DEVICES = 2, 2
TIMEOUT_S = 240  # per launch; a healthy pair finishes in well under a minute
ATOL = 1e-5
RUN = train.TrainConfig(model_overrides="d_model=32,n_layers=2,n_heads=2,max_len=32",
                        seq_len=16, batch_size=8, steps=4, warmup_steps=1, learning_rate=1e-2,
                        log_every=1, eval_every=0, eval_batches=1, checkpoint_every=2,
                        mesh="data=2,fsdp=2", progress=False)


def free_port() -> int:
  with socket.socket() as s:
    s.bind(("localhost", 0))
    return s.getsockname()[1]


def cli_args(tc: train.TrainConfig) -> list[str]:
  """The `python -m experiments train` flags that reproduce `tc` (fields off their default)."""
  args = []
  for f in dataclasses.fields(tc):
    value = getattr(tc, f.name)
    if value == f.default:
      continue
    flag = "--" + f.name.replace("_", "-")
    if isinstance(value, bool):
      args.append(flag if value else "--no-" + flag[2:])
    else:
      args += [flag, str(value)]
  return args


def start(commands: list[list[str]], cwd: str) -> tuple[list[subprocess.Popen], list[str]]:
  """Starts the commands concurrently (each process sees `LOCAL_DEVICES` CPU devices)."""
  env = {**os.environ, "JAX_PLATFORMS": "cpu",
         "XLA_FLAGS": f"--xla_force_host_platform_device_count={LOCAL_DEVICES}",
         "PYTHONPATH": os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))}
  logs = [os.path.join(cwd, f"process-{i}.log") for i in range(len(commands))]
  procs = []
  for command, log in zip(commands, logs, strict=True):
    with open(log, "w") as out:
      procs.append(subprocess.Popen(command, cwd=cwd, env=env, stdout=out,
                                    stderr=subprocess.STDOUT))
  return procs, logs


def launch(commands: list[list[str]], cwd: str) -> list[tuple[int, str]]:
  """Runs the commands concurrently; `(exit status, output)` per command."""
  return collect(*start(commands, cwd))


def collect(procs: list[subprocess.Popen], logs: list[str]) -> list[tuple[int, str]]:
  """Waits for the processes; all are killed at `TIMEOUT_S` (status None)."""
  deadline = time.monotonic() + TIMEOUT_S
  codes = []
  for p in procs:
    try:
      codes.append(p.wait(timeout=max(deadline - time.monotonic(), 0)))
    except subprocess.TimeoutExpired:
      codes.append(None)
  for p in procs:
    if p.poll() is None:
      p.kill()
      p.wait()
  outputs = []
  for log in logs:
    with open(log) as f:
      outputs.append(f.read())
  return list(zip(codes, outputs, strict=True))


PROBE = textwrap.dedent("""
    import sys, jax, jax.numpy as jnp
    print("jax", jax.__version__, "jax_cpu_collectives_implementation",
          jax.config.jax_cpu_collectives_implementation, flush=True)
    jax.distributed.initialize(sys.argv[1], num_processes=int(sys.argv[2]),
                               process_id=int(sys.argv[3]))
    mesh = jax.make_mesh((jax.device_count(),), ("i",))
    ones = jax.make_array_from_callback((jax.device_count(),),
        jax.sharding.NamedSharding(mesh, jax.P("i")), lambda index: jnp.ones(1)[:1])
    print("sum", float(jax.jit(jnp.sum)(ones)))
""")


def skip_if_no_cpu_collectives(cwd: str) -> None:
  """Skips, quoting JAX's error, if two bare processes cannot run one cross-process sum."""
  address = f"localhost:{free_port()}"
  results = launch([[sys.executable, "-c", PROBE, address, str(PROCESSES), str(i)]
                    for i in range(PROCESSES)], cwd)
  expected = f"sum {float(PROCESSES * LOCAL_DEVICES)}"
  if all(code == 0 and expected in out for code, out in results):
    return
  error = next(out for code, out in results if code != 0 or expected not in out)
  pytest.skip("this JAX build cannot run CPU collectives across processes; a bare "
              f"two-process sum fails with:\n{error[-2000:]}")


def metric_rows(run_dir: str) -> list[dict]:
  with open(os.path.join(run_dir, "metrics.jsonl")) as f:
    rows = [json.loads(line) for line in f]
  return [{k: v for k, v in r.items() if k != "tokens_per_s"} for r in rows]


def assert_rows_close(rows: list[dict], expected: list[dict]):
  """Same steps and metrics (loss, grad norm, learning rate, val loss) within `ATOL`."""
  assert [sorted(r) for r in rows] == [sorted(r) for r in expected]
  for got, want in zip(rows, expected, strict=True):
    for k in want:
      np.testing.assert_allclose(got[k], want[k], rtol=0, atol=ATOL, err_msg=f"{k}: {got}")


def assert_close(actual, expected, what: str):
  flat_a, tree_a = jax.tree.flatten_with_path(jax.device_get(actual))
  flat_e, tree_e = jax.tree.flatten_with_path(jax.device_get(expected))
  assert tree_a == tree_e, what
  for (path, a), (_, e) in zip(flat_a, flat_e, strict=True):
    np.testing.assert_allclose(np.asarray(a), np.asarray(e), rtol=0, atol=ATOL,
                               err_msg=f"{what}: {jax.tree_util.keystr(path)}")


def pair_commands(tc: train.TrainConfig) -> list[list[str]]:
  """`python -m experiments train` of `tc` as `PROCESSES` processes joined on localhost."""
  flags = cli_args(tc.replace(distributed=True, coordinator_address=f"localhost:{free_port()}",
                              num_processes=PROCESSES))
  return [[sys.executable, "-m", "experiments", "train", *flags, "--process-id", str(i)]
          for i in range(PROCESSES)]


def train_pair(tc: train.TrainConfig, cwd: str) -> list[tuple[int, str]]:
  return launch(pair_commands(tc), cwd)


def test_two_processes_train_like_one(tmp_path):
  pair_dir = str(tmp_path / "pair")
  results = train_pair(RUN.replace(run_dir=pair_dir), str(tmp_path))
  if any(code != 0 for code, _ in results):
    skip_if_no_cpu_collectives(str(tmp_path))  # else: our bug, reported below
  for i, (code, out) in enumerate(results):
    assert code == 0, f"process {i} exited with {code}:\n{out[-4000:]}"

  # The reference: this process alone, the same global mesh shape on 4 of its 8 devices.
  ref = train.train(RUN.replace(run_dir=str(tmp_path / "single")))

  ref_rows = metric_rows(ref.run_dir)
  assert [r["step"] for r in ref_rows if "loss" in r] == [1, 2, 3, 4]
  assert_rows_close(metric_rows(pair_dir), ref_rows)
  losses = [r["loss"] for r in ref_rows if "loss" in r]
  assert losses[-1] < losses[0] - 0.05  # the runs moved: equality is not of two no-ops

  # The pair's last checkpoint, read in one process onto one device, holds the same params.
  params, cfg = checkpoint.load_run(pair_dir)
  assert cfg == train.model_config(RUN)
  assert_close(params, ref.state.params, "params of the pair's checkpoint 4")

  # Its step-2 checkpoint (params and optimizer state) resumes in one process to the same end.
  resumed_dir = str(tmp_path / "resumed")
  shutil.copytree(pair_dir, resumed_dir)
  shutil.rmtree(os.path.join(resumed_dir, "checkpoints", "4"))
  resumed = train.train(RUN.replace(run_dir=resumed_dir))
  assert int(resumed.state.step) == 4
  assert_close(resumed.state.params, ref.state.params, "params resumed from step 2")
  assert_close(resumed.state.opt_state, ref.state.opt_state, "opt_state resumed from step 2")
  assert_rows_close(metric_rows(resumed_dir), ref_rows)


def test_two_processes_train_like_one_with_sharded_muon(tmp_path):
  """`--optimizer muon` on a mesh with fsdp > 1 orthogonalizes by ownership (`shard="owner"`):
  the pair still equals one process on the same mesh shape."""
  run = RUN.replace(optimizer="muon", muon_learning_rate=0.02)
  pair_dir = str(tmp_path / "pair")
  results = train_pair(run.replace(run_dir=pair_dir), str(tmp_path))
  if any(code != 0 for code, _ in results):
    skip_if_no_cpu_collectives(str(tmp_path))
  for i, (code, out) in enumerate(results):
    assert code == 0, f"process {i} exited with {code}:\n{out[-4000:]}"
  ref = train.train(run.replace(run_dir=str(tmp_path / "single")))
  ref_rows = metric_rows(ref.run_dir)
  assert_rows_close(metric_rows(pair_dir), ref_rows)
  losses = [r["loss"] for r in ref_rows if "loss" in r]
  assert losses[-1] < losses[0] - 0.05
  params, _ = checkpoint.load_run(pair_dir)
  assert_close(params, ref.state.params, "params of the Muon pair's checkpoint 4")


def test_ctrl_c_in_one_process_stops_both_at_the_same_step(tmp_path):
  """Ctrl-C reaching one process only: both stop at the next logging step and save it."""
  pair_dir = str(tmp_path / "pair")
  every = 5
  tc = RUN.replace(run_dir=pair_dir, steps=1_000_000, log_every=every, checkpoint_every=0)
  procs, logs = start(pair_commands(tc), str(tmp_path))
  metrics = os.path.join(pair_dir, "metrics.jsonl")
  deadline = time.monotonic() + TIMEOUT_S
  while time.monotonic() < deadline and all(p.poll() is None for p in procs):
    if os.path.exists(metrics) and len(metric_rows(pair_dir)) >= 2:  # both are stepping
      break
    time.sleep(0.2)
  if all(p.poll() is None for p in procs):
    procs[1].send_signal(signal.SIGINT)
  results = collect(procs, logs)
  if any(code not in (130, None) for code, _ in results):
    skip_if_no_cpu_collectives(str(tmp_path))
  saved = []
  for i, (code, out) in enumerate(results):
    assert code == 130, f"process {i} exited with {code}:\n{out[-4000:]}"
    saved.append(int(re.search(r"interrupted: saved step (\d+)", out).group(1)))
  assert saved[0] == saved[1] and saved[0] % every == 0, saved
  assert sorted(os.listdir(os.path.join(pair_dir, "checkpoints"))) == [str(saved[0])]
  params, _ = checkpoint.load_run(pair_dir)
  assert all(np.all(np.isfinite(x)) for x in jax.tree.leaves(params))


def test_a_mesh_that_leaves_out_a_process_is_refused(tmp_path):
  results = train_pair(RUN.replace(run_dir=str(tmp_path / "pair"), mesh="data=2"),
                       str(tmp_path))
  expected = "--mesh 'data=2' covers 2 of the 4 devices of this 2-process run"
  if any(expected not in out for _, out in results):
    skip_if_no_cpu_collectives(str(tmp_path))
  for i, (code, out) in enumerate(results):
    assert code == 2 and expected in out, f"process {i} exited with {code}:\n{out[-4000:]}"


@pytest.mark.parametrize("changes, match", [
    ({"num_processes": 2, "process_id": 0, "run_dir": "r"}, "--num-processes only applies"),
    ({"distributed": True, "coordinator_address": "localhost:1"}, "--distributed needs --run-dir"),
    ({"distributed": True, "run_dir": "r", "num_processes": 2}, "go together"),
    ({"distributed": True, "run_dir": "r", "num_processes": -1, "process_id": 0},
     "must be a count of processes"),
    ({"distributed": True, "run_dir": "r", "num_processes": 2, "process_id": 2},
     r"0 … --num-processes - 1 = 1"),
])
def test_launch_flags_are_checked(changes, match):
  with pytest.raises(ValueError, match=match):
    RUN.replace(**changes).validate()
