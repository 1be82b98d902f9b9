"""Bad inputs, as a new user makes them (issue 48): each is refused in one line, raised by our own
code (never later inside jax), naming the argument or the leaf and the fix.

Hyper-parameters are refused where the transform or analysis call is built; a parameter tree
whose matrices cannot be read is refused at `init`; gradients shaped unlike the parameters at
`update`, naming the leaf and both shapes.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import analysis
import optim
from tests.refusals import refused

W = jnp.asarray(np.random.default_rng(0).normal(size=(8, 8)), jnp.float32)
F = lambda x: jnp.tanh(x)  # noqa: E731
X = jnp.ones((4,))


def _loss(p, batch):
  del batch
  return jnp.sum(p["w"] ** 2)


# (what is built, the needles its one-line message must hold)
HYPER = {
    # Issue 48: accepted at construction, failing at the first update.
    "muon lr a str": (lambda: optim.muon("0.02"), ["learning_rate='0.02'", "is a str",
                                                   "0.02, without quotes"]),
    "muon adam lr a str": (lambda: optim.muon(0.02, adam_learning_rate="3e-4"),
                           ["adam_learning_rate='3e-4'", "is a str", "schedule"]),
    "muon beta a str": (lambda: optim.muon(0.02, beta="0.9"), ["beta='0.9'", "is a str"]),
    "spectral_cap a str": (lambda: optim.spectral_cap("1.0"), ["max_sigma='1.0'", "is a str"]),
    "spectrum tol a str": (lambda: analysis.spectrum(W, tol="1e-3"), ["tol='1e-3'", "is a str"]),
    # Issue 48: silent.
    "muon lr negative": (lambda: optim.muon(-0.02), ["learning_rate=-0.02", ">= 0",
                                                     "climbs the loss"]),
    "muon adam lr negative": (lambda: optim.muon(0.02, adam_learning_rate=-1e-3),
                              ["adam_learning_rate=-0.001", ">= 0"]),
    # More of the same kinds.
    "muon lr nan": (lambda: optim.muon(float("nan")), ["learning_rate=nan", "finite"]),
    "muon lr a list": (lambda: optim.muon([0.02]), ["learning_rate=[0.02]", "is a list"]),
    "muon lr a bool": (lambda: optim.muon(True), ["learning_rate=True", "is a bool"]),
    "muon lr a vector": (lambda: optim.muon(jnp.ones(2)), ["learning_rate", "shape (2,)"]),
    "muon weight_decay negative": (lambda: optim.muon(0.02, weight_decay=-0.1),
                                   ["weight_decay=-0.1", "grows the weights"]),
    "muon adam_b1 a str": (lambda: optim.muon(0.02, adam_b1="0.9"), ["adam_b1='0.9'"]),
    "muon adam_b2 above 1": (lambda: optim.muon(0.02, adam_b2=1.5), ["adam_b2=1.5", "[0, 1)"]),
    "muon adam_eps negative": (lambda: optim.muon(0.02, adam_eps=-1e-8), ["adam_eps=-1e-08"]),
    "muon adam_weight_decay a str": (lambda: optim.muon(0.02, adam_weight_decay="0.1"),
                                     ["adam_weight_decay='0.1'"]),
    "muon rms zero": (lambda: optim.muon(0.02, rms=0.0), ["rms=0.0", "> 0"]),
    "muon shape_scaling unknown": (lambda: optim.muon(0.02, shape_scaling="spectral"),
                                   ["shape_scaling='spectral'", "'width'"]),
    "muon nesterov a str": (lambda: optim.muon(0.02, nesterov="yes"), ["nesterov='yes'",
                                                                       "True or False"]),
    "muon muon_roles a str": (lambda: optim.muon(0.02, muon_roles="hidden"),
                              ["muon_roles='hidden'", "('hidden',)"]),
    "muon label_fn a str": (lambda: optim.muon(0.02, label_fn="labels"),
                            ["label_fn='labels'", "not callable"]),
    "muon ns_steps a float": (lambda: optim.muon(0.02, ns_steps=2.5), ["ns_steps=2.5"]),
    "muon n_kv_heads not a divisor": (lambda: optim.muon(0.02, n_heads=4, n_kv_heads=3),
                                      ["n_kv_heads=3", "n_heads=4"]),
    "muon split_qkv a str": (lambda: optim.muon(0.02, split_qkv="qkv"), ["split_qkv='qkv'"]),
    "scale_by_muon beta 1": (lambda: optim.scale_by_muon(beta=1.0), ["beta=1.0", "[0, 1)"]),
    "scale_by_muon eps negative": (lambda: optim.scale_by_muon(eps=-1.0), ["eps=-1.0"]),
    "scale_by_muon gram a str": (lambda: optim.scale_by_muon(gram="auto"), ["gram='auto'"]),
    "spectral_cap negative": (lambda: optim.spectral_cap(-1.0), ["max_sigma=-1.0", "> 0"]),
    "spectral_cap inf": (lambda: optim.spectral_cap(float("inf")), ["max_sigma=inf"]),
    "spectral_cap mask a str": (lambda: optim.spectral_cap(1.0, mask="w_o"),
                                ["mask='w_o'", "optim.select"]),
    "spectral_cap tol a str": (lambda: optim.spectral_cap(1.0, tol="1e-3"), ["tol='1e-3'"]),
    "spectral_normalize a str": (lambda: optim.spectral_normalize("1"), ["target='1'"]),
    "scale_by_condition kappa_ref a str": (lambda: optim.scale_by_condition(kappa_ref="10"),
                                           ["kappa_ref='10'"]),
    "scale_by_condition alpha negative": (lambda: optim.scale_by_condition(alpha=-1.0),
                                          ["alpha=-1.0"]),
    "orthogonal_heads strength a str": (lambda: optim.orthogonal_heads("1e-3", 4),
                                        ["strength='1e-3'"]),
    "orthogonal_heads n_kv_heads": (lambda: optim.orthogonal_heads(1e-3, 4, n_kv_heads=3),
                                    ["n_kv_heads=3"]),
    "orthogonal_heads layout_fn": (lambda: optim.orthogonal_heads(1e-3, 4, layout_fn=3),
                                   ["layout_fn=3", "not callable"]),
    "select roles a str": (lambda: optim.select(roles="hidden"), ["roles='hidden'",
                                                                 "('hidden',)"]),
    "head_gram_overlap n zero": (lambda: optim.head_gram_overlap(W, 0), ["n=0"]),
    "condition_multiplier kappa_ref": (lambda: optim.condition_multiplier(2.0, kappa_ref=0.0),
                                       ["kappa_ref=0.0"]),
    "shape_scale rms a str": (lambda: optim.shape_scale(4, 8, "rms", rms="0.2"), ["rms='0.2'"]),
    "spectrum tol negative": (lambda: analysis.spectrum(W, tol=-1.0), ["tol=-1.0", ">= 0"]),
    "jacobian_top k a str": (lambda: analysis.jacobian_top_singular_values(F, X, k="2"),
                             ["k='2'", "int >= 1"]),
    "jacobian_top tol a str": (lambda: analysis.jacobian_top_singular_values(F, X, tol="1e-3"),
                               ["tol='1e-3'"]),
    "jacobian_top tol negative": (lambda: analysis.jacobian_top_eigenvalues(F, X, tol=-1.0),
                                  ["tol=-1.0", "> 0"]),
    "hessian_top k zero": (lambda: analysis.hessian_top_eigenvalues(_loss, {"w": W}, None, k=0),
                           ["k=0"]),
    "hessian_top which": (lambda: analysis.hessian_top_eigenvalues(_loss, {"w": W}, None,
                                                                   which="top"), ["which='top'"]),
    "rank_for_energy above 1": (lambda: analysis.rank_for_energy(W, 1.5), ["energy=1.5"]),
    "energy_captured r zero": (lambda: analysis.energy_captured(W, 0), ["r=0"]),
    "power_law_fit tail": (lambda: analysis.power_law_fit(jnp.arange(1.0, 20.0), tail=2.0),
                           ["tail=2.0", "(0, 1]"]),
    "top_k_mass k zero": (lambda: analysis.top_k_mass(jnp.ones((4, 4)) / 4, 0), ["k=0"]),
    "local_mass window": (lambda: analysis.local_mass(jnp.ones((4, 4)) / 4, -1), ["window=-1"]),
    "rank_certificate tol": (lambda: analysis.rank_certificate(W, tol=-1.0), ["tol=-1.0"]),
    "psd_certificate tol": (lambda: analysis.psd_certificate(W, tol="0"), ["tol='0'"]),
    "stability_threshold lr": (lambda: analysis.stability_threshold("0.1"),
                               ["learning_rate='0.1'"]),
    "jacobian max_bytes a str": (lambda: analysis.jacobian(F, X, max_bytes="1e6"),
                                 ["max_bytes='1e6'", "int >= 1"]),
    "pattern_similarity center": (lambda: analysis.pattern_similarity(
        jnp.ones((1, 2, 4, 4)) / 4, center="col"), ["center='col'", "'row'"]),
    "hessian_spectral_density probes": (lambda: analysis.hessian_spectral_density(
        _loss, {"w": W}, None, num_probes=0), ["num_probes=0"]),
    "sharpness b2": (lambda: analysis.sharpness(_loss, {"w": W}, None, learning_rate=0.1,
                                                optimizer="adam", b2=1.0), ["b2=1.0"]),
    "effective_condition rtol": (lambda: analysis.effective_condition(W, rtol=-1.0),
                                 ["rtol=-1.0"]),
}


@pytest.mark.parametrize("name", sorted(HYPER))
def test_a_bad_hyper_parameter_is_refused_where_it_is_given(name):
  build, needles = HYPER[name]
  with pytest.raises(ValueError) as e:
    build()
  caller = str(e.value).split(":")[0]  # names the function it was given to
  assert caller.split(".")[0] in ("optim", "analysis"), caller
  refused(e, *needles, package=optim if caller.startswith("optim.") else analysis)


# ----------------------------------------------------------------- trees refused at init/update


def _tree():
  rng = np.random.default_rng(1)
  return {"emb": {"weight": jnp.asarray(rng.normal(size=(40, 32)), jnp.float32)},
          "fc1": {"kernel": jnp.asarray(rng.normal(size=(32, 64)), jnp.float32)},
          "fc2": {"kernel": jnp.asarray(rng.normal(size=(64, 32)), jnp.float32)},
          "lm_head": {"kernel": jnp.asarray(rng.normal(size=(32, 40)), jnp.float32)}}


TRANSFORMS = {
    "muon": lambda: optim.muon(0.02),
    "scale_by_muon": lambda: optim.scale_by_muon(),
    "spectral_cap": lambda: optim.spectral_cap(1.0),
    "scale_by_condition": lambda: optim.scale_by_condition(),
}


@pytest.mark.parametrize("name", sorted(TRANSFORMS))
def test_a_gradient_one_column_short_names_the_leaf_and_both_shapes(name):
  params = _tree()
  tx = TRANSFORMS[name]()
  state = tx.init(params)
  grads = jax.tree.map(jnp.ones_like, params)
  grads["fc1"]["kernel"] = jnp.ones((32, 63))
  with pytest.raises(ValueError) as e:
    tx.update(grads, state, params)
  refused(e, f"optim.{name}", "'fc1/kernel'", "(32, 63)", "(32, 64)", package=optim)
  with pytest.raises(ValueError) as e:  # under jit too: the shapes are static
    jax.jit(tx.update)(grads, state, params)
  refused(e, "'fc1/kernel'", "(32, 63)", "(32, 64)", package=optim)
  if name in ("muon", "scale_by_muon"):  # no params: checked against the state's moments
    with pytest.raises(ValueError) as e:
      tx.update(grads, state)
    refused(e, f"optim.{name}", "'fc1/kernel'", "(32, 63)", "(32, 64)", package=optim)


@pytest.mark.parametrize("name", sorted(TRANSFORMS))
def test_a_gradient_tree_missing_a_leaf_names_it(name):
  params = _tree()
  tx = TRANSFORMS[name]()
  grads = jax.tree.map(jnp.ones_like, params)
  del grads["fc2"]
  with pytest.raises(ValueError) as e:
    tx.update(grads, tx.init(params), params)
  refused(e, f"optim.{name}", "lacks the parameter 'fc2/kernel' (64, 32)", package=optim)
  if name in ("muon", "scale_by_muon"):
    with pytest.raises(ValueError) as e:
      tx.update(grads, tx.init(params))
    refused(e, f"optim.{name}", "'fc2/kernel' (64, 32)", package=optim)


def test_scale_by_muon_asks_for_the_axes_of_a_fused_3d_kernel():
  # (8, 3, 8): without matrix_axes it would orthogonalize 8 separate (3, 8) matrices.
  params = {"attn": {"qkv": {"kernel": jnp.ones((8, 3, 8))}}}
  for build in (optim.scale_by_muon, optim.spectral_cap, optim.spectral_normalize,
                optim.scale_by_condition):
    tx = build() if build is not optim.spectral_cap else build(1.0)
    with pytest.raises(ValueError) as e:
      tx.init(params)
    refused(e, "'attn/qkv/kernel' (8, 3, 8)", "matrix_axes=", package=optim)
  tx = optim.orthogonal_heads(1e-3, n_heads=2)
  with pytest.raises(ValueError) as e:
    tx.update(params, tx.init(params), params)
  refused(e, "optim.orthogonal_heads", "'attn/qkv/kernel' (8, 3, 8)", "matrix_axes=",
          package=optim)


def test_a_user_mask_on_a_foreign_stack_asks_for_its_axes():
  params = {"stack": {"kernel": jnp.ones((2, 8, 8))}}
  tx = optim.spectral_cap(1.0, mask={"stack": {"kernel": True}})
  with pytest.raises(ValueError) as e:
    tx.init(params)
  refused(e, "'stack/kernel' (2, 8, 8)", "MatrixAxes(-2, -1)", package=optim)


def test_spectrum_asks_for_the_axes_of_an_array_of_three_axes():
  with pytest.raises(ValueError) as e:
    analysis.spectrum(jnp.ones((8, 3, 8)))
  refused(e, "analysis.spectrum", "W (8, 3, 8)", "matrix_axes=", package=analysis)


def test_a_nan_weight_in_analysis_is_named_outside_jit():
  bad = W.at[2, 3].set(jnp.nan)
  with pytest.raises(ValueError) as e:
    analysis.spectrum(bad)
  refused(e, "analysis.spectrum", "NaN or inf", "check_finite=False", package=analysis)
  # The opt-out, and under jit (values unknown while tracing): NaN comes out, nothing raises.
  assert np.isnan(np.asarray(analysis.spectrum(bad, check_finite=False)["singular_values"])).all()
  assert np.isnan(np.asarray(jax.jit(analysis.spectrum)(bad)["singular_values"])).all()
  params = {"w": W, "b": {"deep": jnp.array([1.0, jnp.inf])}}
  loss = lambda p, batch: jnp.sum(p["w"] ** 2) + jnp.sum(p["b"]["deep"] ** 2)  # noqa: E731
  with pytest.raises(ValueError) as e:
    analysis.hessian_top_eigenvalues(loss, params, None)
  refused(e, "the parameter 'b/deep'", "NaN or inf", package=analysis)


def test_an_unpartitioned_equinox_module_gets_the_partition_fix():
  eqx = pytest.importorskip("equinox")
  model = eqx.nn.Sequential([eqx.nn.Linear(4, 8, key=jax.random.key(0)),
                             eqx.nn.Dropout(0.1), eqx.nn.Linear(8, 4, key=jax.random.key(1))])
  with pytest.raises(ValueError) as e:
    optim.muon(0.02).init(model)
  refused(e, "optim.muon", "'layers/1/inference' is a bool", "eqx.partition", package=optim)
  with pytest.raises(ValueError) as e:
    analysis.hessian_top_eigenvalues(lambda m, b: jnp.sum(m.layers[0].weight), model, None)
  refused(e, "'layers/1/inference'", "eqx.partition", package=analysis)


@pytest.mark.parametrize("name", ["out", "proj_out", "logits_proj"])
def test_an_output_layer_the_shapes_contradict_suggests_output_first(name):
  params = {"emb": {"weight": jnp.ones((40, 32))}, "fc": {"weight": jnp.ones((64, 32))},
            name: {"weight": jnp.ones((40, 32))}}
  with pytest.raises(ValueError) as e:
    optim.muon(0.02).init(params)
  refused(e, f"'{name}/weight' (40, 32)", f"overrides={{'{name}/weight': 'output'}}",
          package=optim)
  msg = str(e.value)
  assert msg.index("'output'") < msg.index("'hidden'")
  # The fix the message names works: 'output' is the unembedding role.
  label_fn = functools.partial(optim.labels, overrides={f"{name}/weight": "output"})
  assert optim.labels(params, overrides={f"{name}/weight": "output"})[name]["weight"] == (
      "unembedding")
  optim.muon(0.02, label_fn=label_fn).init(params)


def test_a_bad_split_qkv_is_named():
  params = {"c_attn": {"weight": jnp.ones((32, 95))}, "fc": {"kernel": jnp.ones((32, 32))}}
  with pytest.raises(ValueError) as e:
    optim.muon(0.02).init(params)
  refused(e, "'c_attn/weight' (32, 95)", "split_qkv={'c_attn/weight': None}", package=optim)
  optim.muon(0.02, split_qkv={"c_attn/weight": None}).init(params)  # the fix works
  with pytest.raises(ValueError) as e:
    optim.muon(0.02, split_qkv={"c_attn/wieght": 3}).init(params)
  refused(e, "split_qkv", "'c_attn/wieght'", "names no leaf", package=optim)


def test_good_inputs_still_pass():
  # A schedule, numpy and jax scalars, and None defaults are all accepted.
  sched = optax.linear_schedule(0.02, 0.0, 100)
  params = _tree()
  for tx in (optim.muon(sched, adam_learning_rate=sched), optim.muon(np.float32(0.02)),
             optim.muon(jnp.asarray(0.02), beta=np.float64(0.9)),
             optim.spectral_cap(np.float32(2.0)), optim.orthogonal_heads(0, 2, layout_fn=lambda
                                                                         p: jax.tree.map(
                                                                             lambda _: None, p))):
    tx.update(jax.tree.map(jnp.ones_like, params), tx.init(params), params)
  assert float(analysis.spectrum(W, tol=np.float32(1e-3))["rank_tol"]) == pytest.approx(1e-3)


def test_the_host_certificates_name_a_nan_before_numpy_fails_on_it():
  bad = np.eye(4)
  bad[1, 2] = np.inf
  for call, name in ((analysis.rank_certificate, "W"), (analysis.psd_certificate, "M")):
    with pytest.raises(ValueError) as e:
      call(bad)
    refused(e, f"{name} holds NaN or inf", "check_finite=False", package=analysis)
  # float64 input is checked in float64: a huge finite value is not an infinity.
  assert int(analysis.rank_certificate(np.eye(3) * 1e300)["rank"]) == 3


def test_analysis_matrices_names_a_nan_parameter():
  import transformer

  cfg = transformer.preset("tiny", n_layers=1, d_model=16, n_heads=2)
  params = transformer.init(cfg, jax.random.key(0))
  params["blocks"]["ffn"]["w_2"] = params["blocks"]["ffn"]["w_2"].at[0, 1, 2].set(jnp.nan)
  with pytest.raises(ValueError) as e:
    analysis.matrices(params, cfg)
  refused(e, "analysis.matrices", "the parameter 'blocks/ffn/w_2'", "NaN or inf",
          package=analysis)
  assert len(analysis.matrices(params, cfg, check_finite=False)) > 0  # the opt-out
