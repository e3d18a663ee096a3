"""Checkpoints of SVI runs in learning-rate stages as the zoo wrote them before such a run kept
the average of its last stage's iterates (revision 933b79a), for
tests/test_checkpoint_format.py. Run once, with that revision's code:
``python tests/data/staged_svi_v1/write.py tests/data/staged_svi_v1``."""

import os
import sys

import numpy as np

import inference
import zoo

out = sys.argv[1]
X = zoo.get_model("gmm").make_data(np.random.default_rng(0), 60)["x"]


def stop(step, state, info):
    if step == 4:
        raise KeyboardInterrupt


for backend in ("pyro", "numpyro"):
    try:
        inference.fit(
            "gmm",
            {"x": X},
            "svi",
            backend,
            num_steps=6,
            lr=[(3, 0.05), (3, 0.01)],
            checkpoint=os.path.join(out, f"svi_{backend}.zoo"),
            callback=stop,
            K=2,
            tol=0.0,
            progress=False,
            seed=1,
        )
    except KeyboardInterrupt:
        pass
