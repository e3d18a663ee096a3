"""``python -m zoo``: list models, fit one, or compare algorithms, from the shell."""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np


def _load_data(path, spec, seed):
    if path is None:
        return spec.make_data(np.random.default_rng(seed))
    if not path.endswith(".npy"):
        raise SystemExit(f"--data must be a .npy file of shape (N, D); got {path!r}.")
    return {"x": np.load(path, allow_pickle=False)}


def _model_options(args):
    opts = {"K": args.K}
    if args.weight_prior:
        opts["weight_prior"] = args.weight_prior
    return opts


def main(argv=None) -> int:
    import inference
    import zoo

    parser = argparse.ArgumentParser(prog="python -m zoo", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="list the registered models").add_argument(
        "--json", action="store_true"
    )
    for name in ("fit", "compare"):
        p = sub.add_parser(name, help=f"{name} a model (default data: the model's built-in set)")
        p.add_argument("model")
        p.add_argument("--data", help="a .npy file of shape (N, D); default: built-in data")
        p.add_argument("--K", type=int, default=10)
        p.add_argument("--weight-prior", choices=["dirichlet_process", "dirichlet_distribution"])
        p.add_argument("--seed", type=int, default=0)
        p.add_argument("--num-steps", type=int)
        p.add_argument("--json", action="store_true", help="machine-readable output")
        if name == "fit":
            p.add_argument("--algorithm", default="cavi")
            p.add_argument("--backend", default="numpyro")
            p.add_argument("--guide")
            p.add_argument("--device", default="cpu")
            p.add_argument("--save", help="write the fit to this file")
        else:
            p.add_argument("--algorithms", default="cavi,em,svi")
            p.add_argument("--backends", default="pyro,numpyro")
            p.add_argument("--plot", help="write objective-vs-time PNG here")
    args = parser.parse_args(argv)

    if args.command == "list":
        models = [
            {
                "name": n,
                "description": zoo.get_model(n).description,
                "algorithms": list(zoo.get_model(n).algorithms),
                "guides": list(zoo.get_model(n).guides),
            }
            for n in zoo.list_models()
        ]
        if args.json:
            print(json.dumps(models, indent=2))
        else:
            for m in models:
                print(f"{m['name']:<16} {m['description']}  [{', '.join(m['algorithms'])}]")
        return 0

    spec = zoo.get_model(args.model)
    data = _load_data(args.data, spec, args.seed)
    try:
        if args.command == "fit":
            res = inference.fit(
                spec,
                data,
                args.algorithm,
                args.backend,
                guide=args.guide,
                device=args.device,
                seed=args.seed,
                num_steps=args.num_steps,
                progress=not args.json,
                **_model_options(args),
            )
            if args.save:
                res.save(args.save)
            out = {
                "model": res.model,
                "algorithm": res.algorithm,
                "backend": res.backend,
                "guide": res.guide,
                "objective": res.objective,
                "objective_per_point": res.objective_per_point,
                "steps": res.num_steps,
                "converged": res.converged,
                "timing": res.timing,
                "params": {k: np.asarray(v).tolist() for k, v in res.params.items()},
            }
            if args.json:
                print(json.dumps(out, indent=2))
            else:
                print(
                    f"{res.model} / {res.algorithm} / {res.backend}: objective "
                    f"{res.objective:.4f} nats ({res.objective_per_point:.4f} per point) "
                    f"after {res.num_steps} steps, converged={res.converged}"
                )
                for k, v in res.params.items():
                    print(f"{k}:\n{np.array2string(np.asarray(v), precision=3)}")
            return 0
        table = inference.compare(
            spec,
            data,
            args.algorithms.split(","),
            args.backends.split(","),
            seeds=(args.seed,),
            num_steps=args.num_steps,
            **_model_options(args),
        )
        print(table.to_json() if args.json else table.to_markdown())
        if args.plot:
            table.plot(args.plot)
        return 0
    except (ValueError, TypeError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
