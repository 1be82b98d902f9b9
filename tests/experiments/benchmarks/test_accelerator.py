"""The accelerator benchmark's peak-FLOPs table (the full script runs in CI, not here)."""

from types import SimpleNamespace

from experiments.benchmarks import accelerator


def test_peak_flops_by_device_kind_flag_and_estimate():
  kind = lambda k: SimpleNamespace(device_kind=k)
  assert accelerator.peak_flops(kind("NVIDIA H100 PCIe"), None, None)[0] == 756e12
  assert accelerator.peak_flops(kind("NVIDIA H100 80GB HBM3"), None, None)[0] == 989e12
  assert accelerator.peak_flops(kind("TPU v5 lite"), None, None)[0] == 197e12
  assert accelerator.peak_flops(kind("TPU v4"), 1.0, 2.0) == (2e12, "--peak-tflops")
  flops, source = accelerator.peak_flops(kind("cpu"), 3.5e10, None)
  assert flops == 3.5e10 and source.startswith("estimated")
