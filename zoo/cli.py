"""``python -m zoo``: list models, fit one, or compare algorithms, from the shell."""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np


def _load_data(path, spec, seed):
    """``--data``: a .npy array for a model with one data key, a .npz of its keys otherwise."""
    if path is None:
        if spec.make_data is None:
            raise ValueError(f"Model {spec.name!r} has no built-in data; pass --data.")
        return spec.make_data(np.random.default_rng(seed))
    keys = sorted(spec.data)
    if path.endswith(".npy") and len(keys) == 1:
        return {keys[0]: np.load(path, allow_pickle=False)}
    if path.endswith(".npz"):
        with np.load(path, allow_pickle=False) as arrays:
            return {k: arrays[k] for k in arrays.files}
    raise ValueError(
        f"--data for {spec.name!r} must be a .npz file holding the arrays {keys}"
        + (f" or a .npy array for {keys[0]!r}" if len(keys) == 1 else "")
        + f"; got {path!r}."
    )


def _model_options(args):
    """The model's own options: --K and --weight-prior (mixtures), and --option NAME=VALUE."""
    opts = {}
    if args.K is not None:
        opts["K"] = args.K
    if args.weight_prior:
        opts["weight_prior"] = args.weight_prior
    for item in args.option:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise ValueError(f"--option takes NAME=VALUE; got {item!r}.")
        try:
            opts[name] = json.loads(value)  # numbers, lists, true/false, null
        except json.JSONDecodeError:
            opts[name] = value  # a plain string
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
        p.add_argument(
            "--data",
            help="a .npy array (one-key models, e.g. (N, D) for a mixture) or a .npz of the "
            "model's data keys; default: the model's built-in data",
        )
        p.add_argument(
            "--K", type=int, help="mixtures: number of components (default: the model's, 10)"
        )
        p.add_argument("--weight-prior", choices=["dirichlet_process", "dirichlet_distribution"])
        p.add_argument(
            "--option",
            action="append",
            default=[],
            metavar="NAME=VALUE",
            help="a model option (repeatable), e.g. --option noise_scale=0.5; VALUE is read as "
            "JSON, else as a string",
        )
        p.add_argument("--seed", type=int, default=0)
        p.add_argument("--num-steps", type=int)
        p.add_argument("--lr", type=float, help="SVI: Adam's learning rate (default 0.05)")
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
        # Listing reads the specs only (check=False): plugins' twins are not imported.
        specs = [zoo.get_model(n, check=False) for n in zoo.list_models()]
        models = [
            {
                "name": spec.name,
                "description": spec.description,
                "algorithms": list(spec.algorithms),
                "guides": list(spec.guides),
                "source": zoo.model_source(spec.name),
            }
            for spec in specs
        ]
        if args.json:
            print(json.dumps(models, indent=2))
        else:
            width = max((len(m["name"]) for m in models), default=0)
            for m in models:
                # "plugin zoo-linear-regression 0.1.0 (entry point ...)": the first part will do
                source = "" if m["source"] == "built-in" else f"  ({m['source'].split(' (')[0]})"
                print(
                    f"{m['name']:<{width}}  {m['description']}  [{', '.join(m['algorithms'])}]"
                    f"{source}"
                )
        return 0

    try:
        spec = zoo.get_model(args.model)
        data = _load_data(args.data, spec, args.seed)
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
                **({} if args.lr is None else {"lr": args.lr}),
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
            **({} if args.lr is None else {"lr": args.lr}),
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
