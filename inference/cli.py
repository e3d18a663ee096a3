"""``zoo`` (or ``python -m inference``): list models and algorithms, fit a model, or compare
algorithms, from the shell.

Options the command does not know are the model's and the algorithm's own, passed to ``fit``
by name: ``--K 8``, ``--weight-prior dirichlet_process``, ``--lr 0.01`` (a value is read as
JSON, else as a string); ``--option NAME=VALUE`` says the same.

Paths are checked before any fitting starts: a missing data file, or a ``--save`` or ``--plot``
path that cannot be written, is an error up front, so no finished run is lost to it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import zipfile

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
from zoo.files import atomic_write

#: The exit status of an error in the command's input (argparse's), of an error while it runs,
#: and of a Ctrl-C (128 + SIGINT, as shells report it).
EXIT_USAGE, EXIT_FAILURE, EXIT_INTERRUPTED = 2, 1, 130

_NPY_MAGIC = b"\x93NUMPY"


class _Parser(argparse.ArgumentParser):
    """argparse, with every error (a subcommand's too) said as ``zoo: error: ...``."""

    def error(self, message):
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"zoo: error: {message}\n")


# --------------------------------------------------------------------------------------------
# argument types: each says which value is wrong and what it takes


def _seed(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer; got {text!r}.") from None
    if not 0 <= value < 2**63:
        raise argparse.ArgumentTypeError(f"must be in the range [0, 2**63); got {text}.")
    return value


def _num_steps(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive integer; got {text!r}.") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer; got {text}.")
    return value


def _algorithm(text: str) -> str:
    try:
        get_algorithm(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return text


def _backend(text: str) -> str:
    if text not in zoo.BACKENDS:
        raise argparse.ArgumentTypeError(
            f"Unknown backend {text!r}; valid backends are {list(zoo.BACKENDS)}."
        )
    return text


def _comma_separated(check, example: str):
    """A type for a comma-separated list of names, each checked by ``check``."""

    def parse(text: str) -> list[str]:
        names = [name.strip() for name in text.split(",")]
        if not all(names):
            raise argparse.ArgumentTypeError(
                f"takes comma-separated names without blanks, e.g. {example}; got {text!r}."
            )
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            raise argparse.ArgumentTypeError(f"names {repeated} more than once; got {text!r}.")
        return [check(name) for name in names]

    return parse


# --------------------------------------------------------------------------------------------
# paths: read and checked before any work is done


def _load_data(path, spec, seed):
    """``--data``: a .npy array for a model with one data key, a .npz of its keys otherwise;
    without it, the model's built-in data. Arrays holding Python objects are never unpickled."""
    if path is None:
        if spec.make_data is None:
            raise ValueError(f"Model {spec.name!r} has no built-in data; pass --data.")
        return spec.make_data(np.random.default_rng(seed))
    if not os.path.exists(path):
        raise ValueError(f"argument --data: no such file {path!r}.")
    if os.path.isdir(path):
        raise ValueError(f"argument --data: {path!r} is a directory, not a data file.")
    keys = sorted(spec.data)
    if path.endswith(".npy") and len(keys) == 1:
        data = {keys[0]: _read_npy(path)}
    elif path.endswith(".npz"):
        data = _read_npz(path)
    else:
        raise ValueError(
            f"argument --data: for model {spec.name!r}, give a .npz file holding the arrays "
            f"{keys}"
            + (f" or a .npy array for {keys[0]!r}" if len(keys) == 1 else "")
            + f"; got {path!r}."
        )
    missing, extra = sorted(set(keys) - set(data)), sorted(set(data) - set(keys))
    if missing or extra:
        raise ValueError(
            f"argument --data: {path!r} holds the arrays {sorted(data)}; model {spec.name!r} "
            f"takes {keys} (missing {missing}, unexpected {extra})."
        )
    for key in keys:
        want = spec.data[key].ndim
        if data[key].ndim != want:
            doc = f" ({spec.data[key].doc})" if spec.data[key].doc else ""
            raise ValueError(
                f"argument --data: the array {key!r} in {path!r} has shape {data[key].shape}; "
                f"model {spec.name!r} takes {want} dimensions{doc}."
            )
    return data


def _unpickled(message: str) -> str:
    # numpy's advice for object arrays is to load them with pickle, which --data never does.
    if "pickle" in message:
        return "it holds Python objects, which are never unpickled; save numeric arrays"
    return message


def _read_npy(path: str) -> np.ndarray:
    try:
        with open(path, "rb") as f:
            if f.read(len(_NPY_MAGIC)) == _NPY_MAGIC:
                f.seek(0)
                return np.load(f, allow_pickle=False)
    except (ValueError, EOFError) as err:
        raise ValueError(
            f"argument --data: {path!r} is not a readable .npy array: {_unpickled(str(err))}."
        ) from None
    except OSError as err:
        raise ValueError(f"argument --data: cannot read {path!r}: {err.strerror}.") from None
    raise ValueError(
        f"argument --data: {path!r} is not a .npy array (it does not start with the header "
        "numpy.save writes)."
    )


def _read_npz(path: str) -> dict[str, np.ndarray]:
    data = None
    try:
        with open(path, "rb") as f:
            if zipfile.is_zipfile(f):
                f.seek(0)
                with np.load(f, allow_pickle=False) as arrays:
                    data = {key: arrays[key] for key in arrays.files}
    except (ValueError, EOFError, zipfile.BadZipFile) as err:
        raise ValueError(
            f"argument --data: {path!r} is not a readable .npz archive: {_unpickled(str(err))}."
        ) from None
    except OSError as err:
        raise ValueError(f"argument --data: cannot read {path!r}: {err.strerror}.") from None
    if data is None:
        raise ValueError(
            f"argument --data: {path!r} is not a .npz archive (not a zip file, as numpy.savez "
            "writes)."
        )
    strays = [key for key, value in data.items() if not isinstance(value, np.ndarray)]
    if strays:  # numpy reads a member that is not a .npy array as its bytes
        raise ValueError(
            f"argument --data: {path!r} is not a readable .npz archive: its members {strays} "
            "are not .npy arrays."
        )
    return data


def _check_folder(flag: str, path: str) -> None:
    """The folder a new file ``path`` goes in exists and can be written; none is created."""
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.exists(folder):
        raise ValueError(
            f"argument {flag}: the folder {folder!r} does not exist; create it first "
            f"(got {path!r})."
        )
    if not os.path.isdir(folder):
        raise ValueError(f"argument {flag}: {folder!r} is not a folder (got {path!r}).")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ValueError(
            f"argument {flag}: cannot write to the folder {folder!r} (permission denied)."
        )


def _save_path(path: str) -> str:
    """``--save``: a file, new or replaced (the fit is written next to it and renamed over it,
    so the folder must be writable and the path, if it exists, a regular file)."""
    if not path:
        raise ValueError("argument --save: give a file name, e.g. fit.zoo.")
    if os.path.isdir(path):
        raise ValueError(
            f"argument --save: {path!r} is a directory; give a file path such as "
            f"{os.path.join(path, 'fit.zoo')!r}."
        )
    if os.path.lexists(path) and not os.path.isfile(path):
        raise ValueError(f"argument --save: {path!r} exists and is not a regular file.")
    _check_folder("--save", path)
    return path


def _plot_path(path: str, model: str) -> tuple[str, str]:
    """``--plot``: ``(the file, its format)``. An existing directory gets ``MODEL-compare.png``
    in it; a name without an extension is written as PNG under that very name."""
    from matplotlib.backend_bases import FigureCanvasBase

    if not path:
        raise ValueError("argument --plot: give a file name, e.g. curves.png.")
    if os.path.isdir(path):
        path = os.path.join(path, f"{model}-compare.png")
        if os.path.isdir(path):
            raise ValueError(f"argument --plot: {path!r} is a directory.")
    formats = FigureCanvasBase.get_supported_filetypes()
    extension = os.path.splitext(path)[1][1:].lower()
    if extension and extension not in formats:
        raise ValueError(
            f"argument --plot: cannot write a '.{extension}' plot; give a file ending in one of "
            f"{', '.join('.' + f for f in sorted(formats))} (got {path!r})."
        )
    if os.path.lexists(path) and not os.path.isfile(path):
        raise ValueError(f"argument --plot: {path!r} exists and is not a regular file.")
    _check_folder("--plot", path)
    return path, extension or "png"


# --------------------------------------------------------------------------------------------
# the command line


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
            raise ValueError(f"argument --option: takes NAME=VALUE; got {item!r}.")
        opts[name] = _json_or_string(value)
    return opts


def _parser() -> argparse.ArgumentParser:
    algorithms = list_algorithms()
    parser = _Parser(
        prog="zoo",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,  # --s is a model's option, not an abbreviation of --seed
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, text in (
        ("list", "list the registered models and the algorithms that fit each"),
        ("algorithms", "list the registered algorithms and their options"),
    ):
        p = sub.add_parser(name, help=text, description=text, allow_abbrev=False)
        p.add_argument("--json", action="store_true", help="machine-readable output")
    for name, text in (
        ("fit", "fit a model (default data: the model's built-in set)"),
        ("compare", "fit a model with several algorithms and backends and tabulate the runs"),
    ):
        p = sub.add_parser(
            name,
            help=text,
            description=f"{text}. Options not listed here are the model's and the algorithm's "
            "own (e.g. --K 8, --lr 0.01; see `zoo algorithms`).",
            allow_abbrev=False,
        )
        p.add_argument("model", help="a registered model (see `zoo list`)")
        p.add_argument(
            "--data",
            metavar="FILE",
            help="a .npy array (one-key models, e.g. (N, D) for a mixture) or a .npz of the "
            "model's data keys; arrays of Python objects are refused, never unpickled "
            "(default: the model's built-in data)",
        )
        p.add_argument(
            "--option",
            action="append",
            default=[],
            metavar="NAME=VALUE",
            help="a model or algorithm option (repeatable), e.g. --option noise_scale=0.5; "
            "VALUE is read as JSON, else as a string",
        )
        p.add_argument(
            "--seed",
            type=_seed,
            default=0,
            metavar="INT",
            help="seeds the built-in data and every random choice of the runs, an integer in "
            "[0, 2**63) (default: %(default)s)",
        )
        p.add_argument(
            "--num-steps",
            type=_num_steps,
            metavar="N",
            help="at most N steps per run, a positive integer (default: each algorithm's own)",
        )
        p.add_argument("--json", action="store_true", help="machine-readable output")
        if name == "fit":
            p.add_argument(
                "--algorithm",
                type=_algorithm,
                choices=algorithms,
                help=f"one of {', '.join(algorithms)} (default: the model's own closed-form "
                "updates, cavi or em, if it has them, else svi; in general the first "
                "registered algorithm that fits the model)",
            )
            p.add_argument(
                "--backend",
                type=_backend,
                choices=zoo.BACKENDS,
                default="numpyro",
                help="one of %(choices)s (default: %(default)s)",
            )
            p.add_argument(
                "--guide",
                help="the guide of a gradient-based algorithm (svi): one of the model's, as "
                "`zoo list` shows (default: the model's first)",
            )
            p.add_argument(
                "--device",
                default="cpu",
                help="cpu, cuda or cuda:N (default: %(default)s)",
            )
            p.add_argument(
                "--save",
                metavar="FILE",
                help="also write the fit to FILE (read back with inference.load); the folder "
                "must exist, and an existing file is replaced",
            )
        else:
            p.add_argument(
                "--algorithms",
                type=_comma_separated(_algorithm, "cavi,svi"),
                metavar="NAMES",
                help=f"comma-separated, from {', '.join(algorithms)} (default: every one that "
                "fits the model or its maximum-likelihood twin)",
            )
            p.add_argument(
                "--backends",
                type=_comma_separated(_backend, "pyro,numpyro"),
                default=",".join(zoo.BACKENDS),
                metavar="NAMES",
                help=f"comma-separated, from {', '.join(zoo.BACKENDS)} (default: %(default)s)",
            )
            p.add_argument(
                "--plot",
                metavar="FILE",
                help="also plot the objective against wall time into FILE; its extension "
                "picks the format (.png, .pdf, .svg, ...; PNG without one). An existing "
                "directory gets MODEL-compare.png inside it; the folder must exist",
            )
    return parser


def main(argv=None) -> int:
    """Run the command line ``argv`` (default: ``sys.argv[1:]``); returns the exit status.

    An error in the input (a name, a value, a path) prints ``zoo: error: ...`` and returns 2;
    an error while running (a failed write) returns 1; Ctrl-C returns 130."""
    try:
        try:
            status = _main(argv)
        finally:
            sys.stdout.flush()  # a closed pipe surfaces here, not at the interpreter's exit
        return status
    except SystemExit as stop:  # argparse: --help, or an error it has printed
        return 0 if stop.code is None else stop.code if isinstance(stop.code, int) else EXIT_USAGE
    except BrokenPipeError:
        # The reader went away (`zoo list | head`): stop quietly. Point stdout at devnull so
        # that Python's own flush at exit does not fail again (Python docs, "Note on SIGPIPE").
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError, AttributeError):
            pass  # stdout is not a file descriptor (captured): nothing is flushed at exit
        return EXIT_FAILURE
    except KeyboardInterrupt:
        print("zoo: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    # CheckpointError (a saved fit that cannot be read) and DatasetError (a bad data file) are
    # ValueErrors; OSError here is a failure of the machine (a full disk), the input's paths
    # being checked before.
    except (ValueError, TypeError) as err:
        print(f"zoo: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as err:
        print(f"zoo: error: {err}", file=sys.stderr)
        return EXIT_FAILURE


def _main(argv) -> int:
    parser = _parser()
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

    # Everything given is checked before the data are made or any fitting starts.
    spec = zoo.get_model(args.model)
    options = _extra_options(args, extra)
    if args.command == "fit":
        return _fit(args, spec, options)
    return _compare(args, spec, options)


def _fit(args, spec, options) -> int:
    algorithm = args.algorithm or first_supporting(spec)
    if args.guide is not None:
        if args.guide not in spec.guides:
            raise ValueError(
                f"argument --guide: model {spec.name!r} has the guides {list(spec.guides)}; "
                f"got {args.guide!r}."
            )
        options["guide"] = args.guide
    save = None if args.save is None else _save_path(args.save)
    data = _load_data(args.data, spec, args.seed)
    res = fit(
        spec,
        data,
        algorithm,
        args.backend,
        device=args.device,
        seed=args.seed,
        num_steps=args.num_steps,
        progress=not args.json,
        **options,
    )
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
    # The result is shown before it is saved, so that a failed write loses nothing on the
    # screen, and saved even if the screen went away (`zoo fit ... --save f.zoo | head`).
    try:
        _print_fit(res, out, args.json)
    finally:
        if save is not None:
            res.save(save)
    return 0


def _print_fit(res, out, as_json: bool) -> None:
    if as_json:
        print(json.dumps(out, indent=2))
    else:
        print(
            f"{res.model} / {res.algorithm} / {res.backend}: objective "
            f"{res.objective:.4f} nats ({res.objective_per_point:.4f} per point) "
            f"after {res.num_steps} steps, converged={res.converged}"
        )
        for k, v in res.params.items():
            print(f"{k}:\n{np.array2string(np.asarray(v), precision=3)}")
    sys.stdout.flush()


def _compare(args, spec, options) -> int:
    plot = None if args.plot is None else _plot_path(args.plot, spec.name)
    data = _load_data(args.data, spec, args.seed)
    table = compare(
        spec,
        data,
        args.algorithms,
        args.backends,
        seeds=(args.seed,),
        num_steps=args.num_steps,
        **options,
    )
    try:
        print(table.to_json() if args.json else table.to_markdown())
        sys.stdout.flush()
    finally:  # plotted even if the screen went away (`zoo compare ... --plot f.png | head`)
        if plot is not None:
            _write_plot(table, *plot)
    return 0


def _write_plot(table, path: str, fmt: str) -> None:
    import io

    import matplotlib

    image = io.BytesIO()
    with matplotlib.rc_context({"savefig.format": fmt}):
        table.plot(image)
    atomic_write(path, lambda f: f.write(image.getvalue()))
    print(f"zoo: wrote the plot to {path}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
