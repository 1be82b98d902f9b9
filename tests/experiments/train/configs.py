"""The small training run the tests of the loop and of the step share."""

from experiments import train

SMALL = train.TrainConfig(model_overrides="d_model=32,n_heads=2,max_len=64", seq_len=32,
                          batch_size=8, steps=40, warmup_steps=5, learning_rate=3e-3,
                          eval_every=20, eval_batches=2, log_every=5, checkpoint_every=20,
                          progress=False)
