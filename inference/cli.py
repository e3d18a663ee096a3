"""``zoo`` (or ``python -m inference``): list models and algorithms, fit a model, or compare
algorithms, from the shell.

Options the command does not know are the model's and the algorithm's own, passed to ``fit``
by name: ``--K 8``, ``--weight-prior dirichlet_process``, ``--lr 0.01`` (a value is read as
JSON, else as a string); ``--option NAME=VALUE`` says the same.
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np

import zoo
from inference.api import fit
from inference.compare import compare
from inference.registry import (
    algorithm_source,
    first_supporting,
    get_algorithm,
    list_algorithms,
)


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


def _json_or_string(value: str):
    try:
        return json.loads(value)  # numbers, lists, true/false, null
    except json.JSONDecodeError:
        return value  # a plain string


def _extra_options(args, extra: list[str]) -> dict:
    """The model's and algorithm's options: ``--NAME VALUE`` (dashes read as underscores) and
    ``--option NAME=VALUE``."""
    opts = {}
    i = 0
    while i < len(extra):
        flag = extra[i]
        name, sep, value = flag[2:].partition("=")
        if not flag.startswith("--") or not name:
            raise ValueError(f"unexpected argument {flag!r}; options are --NAME VALUE.")
        if not sep:
            if i + 1 >= len(extra) or extra[i + 1].startswith("--"):
                raise ValueError(f"option {flag} needs a value.")
            value, i = extra[i + 1], i + 1
        opts[name.replace("-", "_")] = _json_or_string(value)
        i += 1
    for item in args.option:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise ValueError(f"--option takes NAME=VALUE; got {item!r}.")
        opts[name] = _json_or_string(value)
    return opts


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="zoo", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="list the registered models").add_argument(
        "--json", action="store_true"
    )
    sub.add_parser("algorithms", help="list the registered algorithms").add_argument(
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
            "--option",
            action="append",
            default=[],
            metavar="NAME=VALUE",
            help="a model option (repeatable), e.g. --option noise_scale=0.5; VALUE is read as "
            "JSON, else as a string",
        )
        p.add_argument("--seed", type=int, default=0)
        p.add_argument("--num-steps", type=int)
        p.add_argument("--json", action="store_true", help="machine-readable output")
        if name == "fit":
            p.add_argument(
                "--algorithm",
                help="default: the model's own closed-form updates if it has them, else SVI",
            )
            p.add_argument("--backend", default="numpyro")
            p.add_argument("--guide")
            p.add_argument("--device", default="cpu")
            p.add_argument("--save", help="write the fit to this file")
        else:
            p.add_argument(
                "--algorithms", help="comma-separated (default: every one that fits the model)"
            )
            p.add_argument("--backends", default="pyro,numpyro")
            p.add_argument("--plot", help="write objective-vs-time PNG here")
    args, extra = parser.parse_known_args(argv)
    if extra and args.command not in ("fit", "compare"):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")

    if args.command == "algorithms":
        algorithms = [
            {
                "name": name,
                "objective": get_algorithm(name).traits.objective,
                "estimate": get_algorithm(name).traits.estimate,
                "options": list(get_algorithm(name).option_names()),
                "source": algorithm_source(name),
            }
            for name in list_algorithms()
        ]
        if args.json:
            print(json.dumps(algorithms, indent=2))
        else:
            width = max(len(a["name"]) for a in algorithms)
            for a in algorithms:
                print(
                    f"{a['name']:<{width}}  {a['estimate']:<9} {a['objective']:<15} {a['options']}"
                )
        return 0

    if args.command == "list":
        # Listing reads the specs only (check=False): plugins' twins are not imported.
        specs = [zoo.get_model(n, check=False) for n in zoo.list_models()]
        models = [
            {
                "name": spec.name,
                "description": spec.description,
                "algorithms": [a for a in list_algorithms() if get_algorithm(a).supports(spec)],
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
        options = _extra_options(args, extra)
        if getattr(args, "guide", None) is not None:
            options["guide"] = args.guide
        if args.command == "fit":
            res = fit(
                spec,
                data,
                args.algorithm or first_supporting(spec),
                args.backend,
                device=args.device,
                seed=args.seed,
                num_steps=args.num_steps,
                progress=not args.json,
                **options,
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
        table = compare(
            spec,
            data,
            None if args.algorithms is None else args.algorithms.split(","),
            args.backends.split(","),
            seeds=(args.seed,),
            num_steps=args.num_steps,
            **options,
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
