"""``zoo`` (or ``python -m inference``): list models and algorithms, fit a model, or compare
algorithms, from the shell.

Options the command does not know are the model's and the algorithm's own, passed to ``fit``
by name: ``--K 8``, ``--weight-prior dirichlet_process``, ``--lr 0.01`` (a value is read as
JSON, else as a number or a Python literal such as ``True`` or ``(16,)``, else as a string; a
file or a name, such as ``--checkpoint``'s, is taken as typed);
``--option NAME=VALUE`` says the same. ``zoo fit``'s checkpoint options pass the same way:
``--checkpoint FILE``, ``--checkpoint-every N`` and ``--resume true``.
``zoo fit MODEL --help`` lists a model's options, their types, defaults and meanings.

Paths are checked before any fitting starts: a missing data file, or a ``--save`` or ``--plot``
path that cannot be written (or a plot format this machine cannot write), is an error up front,
so no finished run is lost to it.
"""

from __future__ import annotations

import argparse
import ast
import functools
import inspect
import json
import os
import re
import sys
import textwrap
import warnings

import numpy as np

import zoo
from inference.api import fit, model_options
from inference.compare import (
    RUN_OPTIONS,
    compare,
    default_algorithms,
    left_out_message,
    objective_label,
)
from inference.registry import (
    algorithm_source,
    every_option_name,
    first_supporting,
    get_algorithm,
    list_algorithms,
    supporting,
)
from inference.tools import cli_paths
from zoo.docstrings import ParameterDoc, parameter_docs, plain
from zoo.options import did_you_mean

#: The exit status of an error in the command's input (argparse's), of an error while it runs,
#: and of a Ctrl-C (128 + SIGINT, as shells report it).
EXIT_USAGE, EXIT_FAILURE, EXIT_INTERRUPTED = 2, 1, 130
#: Parameters with more values than this are shown by their shape (a network's weights).
MAX_PRINTED_VALUES = 100


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


def _tol(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number >= 0; got {text!r}.") from None
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number in the range [0, inf); got {text}.")
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
            + did_you_mean(text, zoo.BACKENDS)
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
# the command line


#: A number as people type it: digits with an optional sign, point and exponent (no
#: underscores, which Python's float() would read in a name such as 2024_11_29).
_DECIMAL = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")
#: Python's spellings of the constants the help writes defaults with.
PYTHON_CONSTANTS = {"True": True, "False": False, "None": None}


def _read_value(value: str):
    """An option's value: JSON (numbers, lists, true/false, null); else a number as people
    type it (.001, 1., +2); else Python's True, False or None, or a bracketed literal such as
    (100, 100), as the help writes defaults; else the string itself (2024_11_29 or 1,2, which
    Python would read as numbers, stay strings). The run options of :data:`TEXT_OPTIONS` are not
    read by it: they are taken as typed."""
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        pass
    if _DECIMAL.fullmatch(value):  # what JSON does not write: .001, 1., +2, -.5
        return int(value) if value.lstrip("+-").isdigit() else float(value)
    if value in PYTHON_CONSTANTS:
        return PYTHON_CONSTANTS[value]
    if value.strip()[:1] in ("(", "[", "{"):
        try:
            return ast.literal_eval(value)  # literals only: nothing is run
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            pass
    return value


#: Run options whose values are paths or names, taken as typed: read as JSON, a checkpoint
#: named null would be no checkpoint, and one named 100 a number.
TEXT_OPTIONS = ("checkpoint", "dtype", "device", "reference")


def _option_value(name: str, value: str):
    """The value of option ``name`` (as given, dashes or underscores): as typed for
    :data:`TEXT_OPTIONS`, else as :func:`_read_value` reads it."""
    return value if name.replace("-", "_") in TEXT_OPTIONS else _read_value(value)


def _extra_options(args, extra: list[str]) -> dict:
    """The model's and algorithm's options: ``--NAME VALUE`` (dashes read as underscores) and
    ``--option NAME=VALUE`` (read as :func:`_option_value` reads them)."""
    opts = {}

    def give(name, value, how):
        if name in opts:  # `--K 2 --option K=3`: which one the user meant is not for us to pick
            raise ValueError(f"option {name!r} is given twice ({how}); give it once.")
        opts[name] = value

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
        give(name.replace("-", "_"), _option_value(name, value), f"{flag}")
        i += 1
    for item in args.option:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise ValueError(f"argument --option: takes NAME=VALUE; got {item!r}.")
        give(name.replace("-", "_"), _option_value(name, value), f"--option {item}")
    return opts


#: What ``fit`` and ``compare`` take by name, besides the model's and the algorithms' options,
#: that the shell has no flag of its own for: the rest it sets by its flags (``--seed``,
#: ``--json`` for progress, ``--test-data``) or they need Python objects (a callback, ``fit``'s
#: validation arrays).
RUN_OPTIONS_WITHOUT_FLAGS = {
    "fit": ("checkpoint", "checkpoint_every", "resume", "init", "dtype"),
    "compare": ("num_samples", "reference", *RUN_OPTIONS),
}
#: Each command's own flags, for the flag meant by a misspelt option.
COMMON_FLAGS = ("--data", "--option", "--seed", "--num-steps", "--json")
COMMAND_FLAGS = {
    "fit": (*COMMON_FLAGS, "--algorithm", "--backend", "--guide", "--tol", "--device", "--save"),
    "compare": (
        *COMMON_FLAGS,
        "--algorithms",
        "--backends",
        "--guides",
        "--test-data",
        "--plot",
        "--on-error",
    ),
}


def _check_option_names(command: str, spec, options: dict) -> None:
    """An option that neither the model (nor its maximum-likelihood twin, for a comparison),
    nor any algorithm, nor the command's function takes is refused in the shell's words, with
    the flag meant where one is close; which algorithm takes which option is left to the fit."""
    specs = [spec]
    if command == "compare" and spec.maximum_likelihood_twin:
        specs.append(zoo.get_model(spec.maximum_likelihood_twin))
    known = {name for s in specs for name in model_options(s)}
    known |= every_option_name() | set(RUN_OPTIONS_WITHOUT_FLAGS[command])
    if command == "compare":
        known -= {"guide"}  # a comparison runs each of --guides
    for name in options:
        if _flag(name) in COMMAND_FLAGS[command]:
            raise ValueError(
                f"{_flag(name)} is a flag of `zoo {command}`: give it as {_flag(name)} VALUE."
            )
        if command == "compare" and name == "guide":
            raise ValueError("a comparison runs each guide of --guides NAMES (comma-separated).")
        if name not in known:
            flags = [_flag(k) for k in sorted(known)] + list(COMMAND_FLAGS[command])
            hint = did_you_mean(_flag(name), flags)
            raise ValueError(
                f"{_flag(name)} is not an option of model {spec.name!r} or of any algorithm."
                f"{hint} `zoo {command} {spec.name} --help` lists the model's options, "
                "`zoo algorithms` each algorithm's."
            )


def _flag(name: str) -> str:
    """An option's name as the shell spells it: ``weight_prior`` as ``--weight-prior``."""
    return "--" + name.replace("_", "-")


def _model_asked_about(argv: list[str]) -> str | None:
    """MODEL of ``zoo fit MODEL --help`` (or ``compare``): its options join the help."""
    asks = {"-h", "--help"} & set(argv[2:])
    if len(argv) >= 3 and argv[0] in ("fit", "compare") and not argv[1].startswith("-") and asks:
        return argv[1]
    return None


def _add_model_options(parser, name: str) -> None:
    """The options of model ``name`` as a group of the help, from its ``prepare``: the flag, its
    type, its meaning and its default, as the documentation's model page lists them. Only a
    help is built with them: otherwise they are read as any option the command does not know."""
    try:
        spec = zoo.get_model(name, check=False)  # the spec only: no backend is imported
    except ValueError:
        return  # the command's own help, and the unknown name said when it runs
    docs = parameter_docs(spec.prepare)
    signature = inspect.signature(spec.prepare).parameters
    group = parser.add_argument_group(
        f"options of model {spec.name} (--NAME VALUE, or --option NAME=VALUE)"
    )
    for option in model_options(spec):
        doc = docs.get(option, ParameterDoc("", ""))
        default = signature[option].default
        default = "required" if default is inspect.Parameter.empty else repr(default)
        meaning = plain(doc.meaning).replace("%", "%%")  # argparse formats help with %
        group.add_argument(
            f"--{option.replace('_', '-')}",
            metavar=_metavar(doc.type),
            help=f"{meaning} [{plain(doc.type) or 'a value'}; default: {default}]",
        )


def _metavar(kind: str) -> str:
    """``int`` reads INT; a set of choices, an array or anything else, VALUE."""
    first = kind.split(",")[0].strip()
    return first.upper() if first in ("int", "float", "str", "bool") else "VALUE"


def _guides_of(model: str) -> tuple:
    """The guides of ``model``, or none for a name that is not a registered model."""
    try:
        return tuple(zoo.get_model(model, check=False).guides)
    except ValueError:
        return ()


def _fitting(model: str) -> list[str]:
    """The registered algorithms that fit ``model`` itself, or all of them for a name that is
    not a registered model (the command's own error says so)."""
    try:
        return supporting(zoo.get_model(model))
    except ValueError:
        return list_algorithms()


#: What ``zoo fit --help`` says of the run options it passes to ``fit`` without flags of its own.
FIT_EPILOG = (
    "Checkpoints: --checkpoint FILE writes the run's checkpoint to FILE every --checkpoint-every "
    "N steps (default: 100) and at its end, early stop or Ctrl-C; --resume true continues the run "
    "from FILE if it exists, to the result of an uninterrupted run "
    "(docs/guide/checkpoints.md). FILE is taken as typed. --dtype float32 or float64 and --init "
    "NAME are passed to the fit too."
)

#: What ``zoo compare --help`` says of each run option it passes to every run without a flag of
#: its own (:data:`RUN_OPTIONS_WITHOUT_FLAGS`): its value and its meaning, one line each.
COMPARE_RUN_OPTIONS = {
    "tol": (
        "TOL",
        "the stopping rule's tolerance, in nats per data point; 0 runs exactly --num-steps "
        "steps (default: each algorithm's or the model's own)",
    ),
    "init": (
        "NAME",
        "how each run starts: kmeans, random or random_from_data, a mixture's initial "
        "responsibilities (default: kmeans for a mixture, else the model's own)",
    ),
    "dtype": (
        "float32|float64",
        "the precision of every run (default: the model's, else each algorithm's)",
    ),
    "device": ("DEVICE", "cpu, cuda or cuda:N, for every run (default: cpu)"),
    "num_samples": (
        "N",
        "posterior draws that score heldout_log_pred_per_point and the accuracy columns "
        "(default: 500)",
    ),
    "reference": (
        "NAME",
        "exact (the model's closed-form posterior) or a sampler (nuts): every run's posterior "
        "is measured against it, in accuracy columns (default: none)",
    ),
}


def _compare_epilog() -> str:
    """The run options of ``zoo compare``, one line each, in the order ``--help`` lists them."""
    flags = {name: f"{_flag(name)} {value}" for name, (value, _) in COMPARE_RUN_OPTIONS.items()}
    width = max(len(flag) for flag in flags.values())
    return "Run options, passed to every run by name (--NAME VALUE, or --option NAME=VALUE):\n" + (
        "\n".join(
            f"  {flags[name]:<{width}}  {meaning}"
            for name, (_, meaning) in COMPARE_RUN_OPTIONS.items()
        )
    )


class _LinesFormatter(argparse.HelpFormatter):
    """argparse's help, but each line of a description or epilog stays a line of its own
    (wrapped to the terminal, its continuation indented under its text), so that a list of
    options reads as one."""

    def _fill_text(self, text, width, indent):
        lines = []
        for line in text.splitlines():
            # "  --tol TOL    the stopping rule's ...": continue under "the"
            hang = re.match(r"\s*(\S+ \S+\s+)?", line).end() if line.startswith(" ") else 0
            lines.append(
                textwrap.fill(
                    line, width, initial_indent=indent, subsequent_indent=indent + " " * hang
                )
            )
        return "\n".join(lines)


# Longer than the layer's other functions, and kept whole: a flat declaration of the command
# line, one add_argument per option, in the order ``--help`` lists them.
def _parser(model: str | None = None) -> argparse.ArgumentParser:
    """The command line; with ``model``, ``fit`` and ``compare`` list that model's options too
    (for their ``--help``)."""
    algorithms = list_algorithms()
    guides = _guides_of(model) if model is not None else ()
    parser = _Parser(
        prog="zoo",
        description=plain(__doc__),
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
            "own (e.g. --K 8, --lr 0.01): `%(prog)s MODEL --help` lists MODEL's, `zoo "
            "algorithms` the algorithms'; the run options below pass the same way.",
            epilog=FIT_EPILOG if name == "fit" else _compare_epilog(),
            formatter_class=argparse.HelpFormatter if name == "fit" else _LinesFormatter,
            allow_abbrev=False,
        )
        p.add_argument("model", help="a registered model (see `zoo list`)")
        p.add_argument(
            "--data",
            metavar="FILE",
            help="a .npz of the model's data keys (optional ones may be left out), or a .npy "
            "array for the one key the model needs (its only key, e.g. (N, D) for a mixture); "
            "arrays of Python objects are refused, never unpickled (default: the model's "
            "built-in data)",
        )
        p.add_argument(
            "--option",
            action="append",
            default=[],
            metavar="NAME=VALUE",
            help="a model or algorithm option (repeatable), e.g. --option K=8; VALUE is read "
            "as JSON, else as a number or a Python literal (True, (16,)), else as a string (a "
            "file or a name, such as --checkpoint's, as typed)",
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
        if model is not None:
            _add_model_options(p, model)
        if name == "fit":
            fitting = _fitting(model) if model is not None else algorithms
            p.add_argument(
                "--algorithm",
                type=_algorithm,
                choices=algorithms,
                metavar="{" + ",".join(fitting) + "}",
                help=f"one of {', '.join(fitting)} (default: the model's own closed-form "
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
                help="the guide of a gradient-based algorithm (svi): one of the model's "
                + (", ".join(guides) if guides else "guides (`zoo list --json` lists them)")
                + " (default: the model's first)",
            )
            p.add_argument(
                "--tol",
                type=_tol,
                metavar="TOL",
                help="the stopping rule's tolerance, in nats per data point; 0 runs exactly "
                "--num-steps steps without a convergence warning (default: the algorithm's or "
                "the model's own)",
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
                "fits the model or its maximum-likelihood twin, except the samplers (nuts), "
                "which take minutes; a line says what was left out)",
            )
            p.add_argument(
                "--backends",
                type=_comma_separated(_backend, "pyro,numpyro"),
                default=",".join(zoo.BACKENDS),
                metavar="NAMES",
                help=f"comma-separated, from {', '.join(zoo.BACKENDS)} (default: %(default)s)",
            )
            p.add_argument(
                "--guides",
                type=_comma_separated(str, "enum,gumbel"),
                metavar="NAMES",
                help="comma-separated guides of the algorithms that take one (svi), from the "
                + (f"model's {', '.join(guides)}" if guides else "model's (`zoo list --json`)")
                + " (default: every one)",
            )
            p.add_argument(
                "--test-data",
                metavar="FILE",
                help="held-out data, as --data takes them, that the heldout_log_pred_per_point "
                "column scores (default: the training data, --data's or the built-in set, so "
                "that the column then says how well each fit predicts the data it was fitted "
                "to, not new data)",
            )
            p.add_argument(
                "--plot",
                metavar="FILE",
                help="also plot the objective against wall time into FILE; its extension "
                "picks the format (.png, .pdf, .svg, ...; PNG without one), one this machine "
                "can write (.pgf needs LaTeX). An existing directory gets MODEL-compare.png "
                "inside it; the folder must exist",
            )
            p.add_argument(
                "--on-error",
                choices=("raise", "record"),
                default="raise",
                help="a run that fails: stop with its error (raise, the default), or warn, "
                "keep its error in the table's error column and go on with the other runs "
                "(record)",
            )
    return parser


def main(argv=None) -> int:
    """Run the command line ``argv`` (default: ``sys.argv[1:]``); returns the exit status.

    An error in the input (a name, a value, a path) prints ``zoo: error: ...`` and returns 2;
    an error while running (a failed write) returns 1; Ctrl-C returns 130."""
    try:
        try:
            held = []  # numpy's floating-point warnings, said only if no error follows
            with warnings.catch_warnings():
                warnings.showwarning = functools.partial(_show_warning, held=held)
                status = _main(argv)
            for message, category in held:  # an error would have said more ("diverged")
                _show_warning(message, category, "", 0)
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
    except FloatingPointError as err:  # NonFiniteObjectiveError: a run that diverged, with advice
        print(f"zoo: error: {' '.join(str(err).split())}", file=sys.stderr)
        return EXIT_FAILURE
    except OSError as err:
        print(f"zoo: error: {err}", file=sys.stderr)
        return EXIT_FAILURE


def _show_warning(message, category, filename, lineno, file=None, line=None, held=None) -> None:
    """A warning as the shell says things, ``zoo: ConvergenceWarning: ...``: no source line.
    numpy's floating-point warnings ("overflow encountered in matmul") go to ``held``, when
    given: before the error that says a run diverged, they say less."""
    if (
        held is not None
        and issubclass(category, RuntimeWarning)
        and "encountered in" in str(message)
    ):
        held.append((message, category))
        return
    print(f"zoo: {category.__name__}: {message}", file=sys.stderr if file is None else file)


def _main(argv) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    asked = _model_asked_about(argv)
    if asked is not None and asked not in zoo.list_models():
        _parser().error(_unknown_model(asked, argv))
    parser = _parser(asked)
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
            rows = [("algorithm", "estimate", "objective", "options")] + [
                (a["name"], a["estimate"], a["objective"], ", ".join(a["options"]) or "-")
                for a in algorithms
            ]
            widths = [max(len(row[i]) for row in rows) for i in range(3)]
            for row in rows:
                print(
                    "  ".join(f"{cell:<{w}}" for cell, w in zip(row[:3], widths, strict=True))
                    + "  "
                    + row[3]
                )
        return 0

    if args.command == "list":
        # Listing reads the specs only (check=False): plugins' twins are not imported.
        specs = [zoo.get_model(n, check=False) for n in zoo.list_models()]
        models = [
            {
                "name": spec.name,
                "description": spec.description,
                "algorithms": supporting(spec),
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
    if args.model not in zoo.list_models():
        _parser().error(_unknown_model(args.model, argv))
    spec = zoo.get_model(args.model)
    options = _extra_options(args, extra)
    _check_option_names(args.command, spec, options)
    if args.command == "fit":
        return _fit(args, spec, options)
    return _compare(args, spec, options)


def _unknown_model(name: str, argv: list[str]) -> str:
    """The error for a model ``name`` that is not registered; when it follows an option
    (``zoo fit --K 3 gmm``, where argparse takes 3 for the model), it says that the model's name
    comes first."""
    models = zoo.list_models()
    message = (
        f"argument model: unknown model {name!r}; the models are {models}."
        f"{did_you_mean(name, models)} `zoo list` says what each is."
    )
    at = argv.index(name, 1) if name in argv[1:] else 0
    # An option of the model's or an algorithm's, unknown to argparse, leaves its value behind.
    before = argv[at - 1] if at > 1 else ""
    if before.startswith("-") and before not in COMMAND_FLAGS.get(argv[0], ()):
        named = [arg for arg in argv[at + 1 :] if arg in models]
        model = named[0] if named else "MODEL"
        options = " ".join(arg for arg in argv[1:] if arg != model)
        message += (
            f" It follows the option {before}: the model's name comes first, options "
            f"after it, as in `zoo {argv[0]} {model} {options}`."
        )
    return message


def _fit(args, spec, options) -> int:
    algorithm = args.algorithm or first_supporting(spec)
    if args.guide is not None:
        if args.guide not in spec.guides:
            raise ValueError(
                f"argument --guide: model {spec.name!r} has the guides {list(spec.guides)}; "
                f"got {args.guide!r}."
            )
        options["guide"] = args.guide
    _check_checkpoint_options(options)
    save = (
        None
        if args.save is None
        else cli_paths.save_path(args.save, [args.data], options.get("checkpoint"))
    )
    data = cli_paths.load_data(args.data, spec, args.seed)
    res = fit(
        spec,
        data,
        algorithm,
        args.backend,
        device=args.device,
        seed=args.seed,
        num_steps=args.num_steps,
        tol=args.tol,
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
            try:
                res.save(save)
            except OSError as err:
                raise OSError(
                    f"cannot write the fit to {save}: {cli_paths.reason_writing(err, save)}. "
                    "The fit's results are above; an earlier file there is kept whole."
                ) from err
            print(f"zoo: saved the fit to {save} (inference.load to read it)", file=sys.stderr)
    return 0


def _check_checkpoint_options(options: dict) -> None:
    """``--checkpoint-every`` and ``--resume true`` without ``--checkpoint``, refused in the
    shell's words (``fit`` would name its own arguments, checkpoint= and resume=)."""
    if options.get("checkpoint") is not None:
        return
    if options.get("checkpoint_every") is not None:
        raise ValueError("--checkpoint-every needs --checkpoint FILE, the file to write.")
    if options.get("resume") is True:
        raise ValueError("--resume true needs --checkpoint FILE, the file to resume from.")


def _print_fit(res, out, as_json: bool) -> None:
    if as_json:
        print(json.dumps(out, indent=2))
    else:
        # A stochastic algorithm's last objective is its last step's, taken before that step's
        # update (a Monte-Carlo estimate unless the guide draws nothing at random), and SVI in
        # stages returns the average of its last stage's iterates: said, so that it is not read
        # as a score of the returned fit.
        alg = get_algorithm(res.algorithm)
        if alg.traits.estimate == "draws":  # a sampler: no stopping rule, chunks for steps
            estimate = "; the mean over chains at the last draw"
            chains, warmup, draws = res.chains
            length = f"{chains} chain(s) of {warmup} warm-up and {draws} draws"
        else:
            estimate = "; the last step's, not the returned fit's" if alg.traits.stochastic else ""
            length = f"{res.num_steps} steps, converged={res.converged}"
        print(
            f"{res.model} / {res.algorithm} / {res.backend}: "
            f"{objective_label(alg, res.spec, res.backend, res.guide, res.config)} "
            f"{res.objective:.4f} nats "
            f"({res.objective_per_point:.4f} per point{estimate}) after {length}"
        )
        for k, v in res.params.items():
            v = np.asarray(v)
            if v.size > MAX_PRINTED_VALUES:  # a network's weights: their shape, not pages
                print(f"{k}: {v.dtype} array of shape {v.shape} (--json or --save for values)")
            else:
                print(f"{k}:\n{np.array2string(v, precision=3)}")
    sys.stdout.flush()


def _compare(args, spec, options) -> int:
    plot = None if args.plot is None else cli_paths.plot_path(args.plot, spec.name)
    data = cli_paths.load_data(args.data, spec, args.seed)
    test_data = (
        None
        if args.test_data is None
        else cli_paths.load_data(args.test_data, spec, args.seed, "--test-data")
    )
    algorithms = args.algorithms
    if algorithms is None:  # said here in the shell's words, not as compare's Python warning
        algorithms, left_out = default_algorithms(spec)
        if left_out:
            print(f"zoo: {left_out_message(spec, left_out, shell=True)}", file=sys.stderr)
    table = compare(
        spec,
        data,
        algorithms,
        args.backends,
        guides=args.guides,
        seeds=(args.seed,),
        test_data=test_data,
        num_steps=args.num_steps,
        progress=not args.json,
        on_error=args.on_error,
        **options,
    )
    status = 0
    try:
        print(table.to_json() if args.json else table.to_markdown())
        sys.stdout.flush()
    finally:  # plotted even if the screen went away (`zoo compare ... --plot f.png | head`)
        if plot is not None:
            status = _write_plot(table, *plot)
    return status


def _write_plot(table, path: str, fmt: str) -> int:
    """Write the plot; returns the exit status. A plot that cannot be drawn or written is one
    line, after the printed table: the runs' results are not lost to it (nor is the file that
    was at ``path``: the plot is written whole or not at all)."""
    import matplotlib

    try:
        # ``fmt`` for a name without an extension (PNG), whatever matplotlib's settings say.
        with matplotlib.rc_context({"savefig.format": fmt}):
            table.plot(path)
    # A writer raises what it will (RuntimeError for a missing LaTeX), though the format was
    # tried before the fits: an environment can change in between.
    except Exception as err:
        print(
            f"zoo: error: cannot write the plot to {path}: {cli_paths.reason_writing(err, path)}. "
            "The table above holds the runs' results.",
            file=sys.stderr,
        )
        return EXIT_FAILURE
    print(f"zoo: wrote the plot to {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
