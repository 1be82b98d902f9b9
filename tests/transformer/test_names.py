"""The naming authority: one table that the catalog, analysis, optim and weight decay all read."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import analysis
import optim
import transformer
from transformer import names


@pytest.fixture(scope="module")
def model():
  cfg = transformer.preset("llama-tiny", d_model=32, n_heads=4, n_kv_heads=2, d_ff=64)
  return cfg, transformer.init(cfg, jax.random.key(0))


def test_path_str_and_longest_suffix_rule():
  tree = {"params": {"blocks": {"attn": {"w_q": 0}}}, "seq": [{"w_out": 1}]}
  paths = [names.path_str(p) for p, _ in jax.tree_util.tree_leaves_with_path(tree)]
  assert paths == ["params/blocks/attn/w_q", "seq/0/w_out"]
  assert names.key_of(paths[0]) == "w_q"
  assert names.key_of("embed/embedding") == "embed/embedding"
  assert names.key_of("pos_embed/embedding") == "pos_embed/embedding"  # not `embed/embedding`
  assert names.key_of("seq/0/w_out") is None  # `unembed/w_out` needs its `unembed/`
  assert names.name_of("blocks/norm_1/scale").update == "vector"
  assert names.name_of("blocks/attn/mystery").kind == "vector"  # unknown -> vector


def test_library_key_only_at_the_place_of_our_trees():
  """Our names are ours at their place in `transformer.init`'s tree, nowhere else."""
  assert names.library_key("params/blocks/attn/w_q") == "w_q"
  assert names.library_key("blocks/ffn/w_gate") == "w_gate"
  assert names.library_key("blocks/norm_2/scale") == names.library_key("norm_f/scale") == "scale"
  assert names.library_key("unembed/w_out") == "unembed/w_out"
  for foreign in ("w_q", "attn/w_q", "encoder/blocks/mlp/w_q", "layers/0/ffn/w_1",
                  "norm/scale", "blocks/attn/w_z"):
    assert names.library_key(foreign) is None, foreign
  assert names.key_of("attn/w_q") == "w_q"  # the name itself is still known


def test_decay_mask_is_every_weight_matrix(model):
  cfg, params = model
  mask = names.decay_mask(params)
  for path, leaf in jax.tree_util.tree_leaves_with_path(params):
    # Reference: the rule `experiments.train` used before this table (matrices, counting
    # the stacked layer axis of blocks).
    is_matrix = leaf.ndim >= 3 or (leaf.ndim == 2 and path[0].key != "blocks")
    assert names.decays(path) == is_matrix, names.path_str(path)
  assert jax.tree.structure(mask) == jax.tree.structure(params)


def test_one_line_adds_a_matrix_to_every_consumer(model, monkeypatch):
  cfg, params = model
  L, D = cfg.n_layers, cfg.d_model
  extra = {}
  for key, name in names.NAMES.items():  # the one-line change: a line after `w_2`
    extra[key] = name
    if key == "w_2":
      extra["w_extra"] = names.Name("feed-forward", "hidden", 5, "an extra map")
  monkeypatch.setattr(names, "NAMES", extra)
  ffn = {**params["blocks"]["ffn"], "w_extra": jnp.ones((L, D, D))}
  params = {**params, "blocks": {**params["blocks"], "ffn": ffn}}

  entries = {e.path: e for e in transformer.catalog(params, cfg)}
  assert entries["blocks/ffn/w_extra"].shape == (L, D, D)
  assert entries["blocks/ffn/w_extra"].role == "feed-forward"
  assert [e.path for e in transformer.catalog(params, cfg)][-2:] == [
      "blocks/ffn/w_extra", "unembed/w_out"]  # NAMES order

  found = [(m.path, m.layer) for m in analysis.matrices(params, cfg, include_circuits=False)]
  assert [("blocks/ffn/w_extra", l) in found for l in range(L)] == [True] * L
  assert found.index(("blocks/ffn/w_extra", 0)) < found.index(("blocks/attn/w_q", 1))

  assert optim.labels(params)["blocks"]["ffn"]["w_extra"] == "hidden"
  assert optim.select()(params)["blocks"]["ffn"]["w_extra"]
  assert names.decay_mask(params)["blocks"]["ffn"]["w_extra"]
  # The training loop's AdamW decays it: zero gradients leave only the decay.
  from experiments import train
  tc = train.TrainConfig(weight_decay=0.5, learning_rate=1.0, warmup_steps=0, steps=10)
  adamw = train.optimizer(tc)
  zeros = jax.tree.map(jnp.zeros_like, params)
  decayed, _ = adamw.update(zeros, adamw.init(params), params)
  assert float(jnp.abs(decayed["blocks"]["ffn"]["w_extra"]).min()) > 0
  assert float(jnp.abs(decayed["blocks"]["norm_1"]["scale"]).max()) == 0
  # Muon orthogonalizes it: singular values of the update in Newton–Schulz's band around 1
  # (AdamW's first step, ±lr per entry, would have σ_max ≈ 2·sqrt(32)·lr).
  tx = optim.muon(0.02)
  grads = jax.tree.map(lambda p: jax.random.normal(jax.random.key(1), p.shape), params)
  u, _ = tx.update(grads, tx.init(params), params)
  s = jnp.linalg.svd(u["blocks"]["ffn"]["w_extra"][0] / -0.02, compute_uv=False)
  assert float(s.max()) < 1.2 and float(jnp.median(s)) > 0.6

  monkeypatch.undo()
  # Without its line, a matrix is never silently a vector: labels names it and the fix.
  with pytest.raises(ValueError, match="'blocks/ffn/w_extra' \\(2, 32, 32\\).*label_fn="):
    optim.labels(params)
  assert "blocks/ffn/w_extra" not in {e.path for e in transformer.catalog(params, cfg)}


def test_head_sides_come_from_the_table(model):
  cfg, params = model
  layout = optim.head_layout(params, cfg.n_heads, cfg.n_kv_heads)["blocks"]["attn"]
  for key in ("w_q", "w_k", "w_v", "w_o"):
    side, count = names.NAMES[key].heads
    assert layout[key] == (side, {"H": cfg.n_heads, "K": cfg.n_kv_heads}[count])


def _modules():
  import importlib
  import pkgutil

  for package in ("transformer", "analysis", "optim", "experiments"):
    root = importlib.import_module(package)
    for info in pkgutil.walk_packages(root.__path__, package + "."):
      yield info.name


# `experiments.train.train` is spelled out as a contract by the claims runner's issue (each
# `train_many` run must equal it), so that one module keeps its function's name.
_CONTRACT = {"experiments.train"}


@pytest.mark.parametrize("module", [m for m in _modules() if m not in _CONTRACT])
def test_no_public_function_shadows_its_module(module):
  """`optim.labels` is the function, so a module `optim/labels.py` would make
  `optim.labels.select` a broken path: no module defines a function of its own name."""
  import importlib

  mod = importlib.import_module(module)
  short = module.rsplit(".", 1)[-1]
  fn = getattr(mod, short, None)
  assert not (callable(fn) and getattr(fn, "__module__", None) == module), module


def test_renamed_paths_are_functions():
  import inspect

  for fn in (optim.labels, optim.select, optim.muon, transformer.catalog, analysis.matrices):
    assert inspect.isfunction(fn), fn
  assert not hasattr(optim.labels, "select")


@pytest.mark.parametrize("side", ["columns", "rows"])
@pytest.mark.parametrize("lead", [(), (3,), (2, 3)])
def test_split_heads_is_the_hand_slicing_and_merge_inverts_it(side, lead):
  """Head `h` of a column split is `W[..., :, h·Dh:(h+1)·Dh]`, of a row split
  `W[..., h·Dh:(h+1)·Dh, :]`: checked slice by slice in float64 NumPy, with stacked axes."""
  n, dh, d = 3, 4, 5
  shape = lead + ((d, n * dh) if side == "columns" else (n * dh, d))
  W = np.random.default_rng(0).normal(size=shape)
  blocks = names.split_heads(W, n, side)
  assert blocks.dtype == np.float64  # NumPy in, NumPy out: no float32 round trip
  want = np.stack([W[..., :, h * dh:(h + 1) * dh] if side == "columns"
                   else W[..., h * dh:(h + 1) * dh, :] for h in range(n)], axis=-3)
  np.testing.assert_array_equal(blocks, want)
  np.testing.assert_array_equal(names.merge_heads(blocks, side), W)
  # The same under jit on JAX arrays, and split ∘ merge is the identity on blocks too.
  got = jax.jit(lambda w: names.split_heads(w, n, side))(jnp.asarray(W, jnp.float32))
  np.testing.assert_allclose(got, want, rtol=1e-6)
  np.testing.assert_array_equal(names.split_heads(names.merge_heads(want, side), n, side), want)


def test_split_heads_reads_name_heads_and_refuses_bad_input(model):
  cfg, params = model
  attn = params["blocks"]["attn"]
  count = {"H": cfg.n_heads, "K": cfg.n_kv_heads}
  for leaf in ("w_q", "w_k", "w_v", "w_o"):
    side, n = names.NAMES[leaf].heads
    blocks = names.split_heads(attn[leaf], count[n], side)
    inner = (cfg.d_model, cfg.d_head) if side == "columns" else (cfg.d_head, cfg.d_model)
    assert blocks.shape == (cfg.n_layers, count[n]) + inner
  with pytest.raises(ValueError, match="n=3 heads"):
    names.split_heads(attn["w_q"], 3, "columns")
  with pytest.raises(ValueError, match="side='cols'"):
    names.split_heads(attn["w_q"], 4, "cols")
