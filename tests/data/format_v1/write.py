"""Checkpoints and a saved fit as the zoo wrote them before algorithms became registry entries
(revision f47928c), for tests/test_checkpoint_format.py. Run once, with that revision's code:
``python tests/data/format_v1/write.py tests/data/format_v1``."""

import json
import os
import sys

import numpy as np

import inference
import zoo

out = sys.argv[1]
X = zoo.get_model("bayesian_gmm").make_data(np.random.default_rng(0), 60)["x"]
runs = {
    "cavi_numpyro": ("bayesian_gmm", "cavi", "numpyro", {}),
    "svi_pyro": ("bayesian_gmm", "svi", "pyro", {"guide": "enum"}),
    "svi_numpyro": ("bayesian_gmm", "svi", "numpyro", {"guide": "enum"}),
    "svi-natural_numpyro": ("bayesian_gmm", "svi-natural", "numpyro", {"batch_size": 20}),
}
expected = {}
for name, (model, alg, backend, opts) in runs.items():
    kw = dict(K=2, tol=0.0, progress=False, seed=1, **opts)

    def stop(step, state, info):
        if step == 3:
            raise KeyboardInterrupt

    try:
        inference.fit(
            model,
            {"x": X},
            alg,
            backend,
            num_steps=6,
            checkpoint=os.path.join(out, name + ".zoo"),
            callback=stop,
            **kw,
        )
    except KeyboardInterrupt:
        pass
    full = inference.fit(model, {"x": X}, alg, backend, num_steps=6, **kw)
    expected[name] = full.history["objective"].tolist()
    if name == "cavi_numpyro":
        full.save(os.path.join(out, "cavi_numpyro.fit.zoo"))
json.dump(expected, open(os.path.join(out, "expected.json"), "w"), indent=1)
