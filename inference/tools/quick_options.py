"""The options an example's ``--quick`` shrinks: only those the user left out.

Each such option parses to None when it is not given, so that a value the user typed wins even
where it equals the full default; :meth:`QuickDefaults.resolve` then fills in the rest.
"""

from __future__ import annotations


def _shown(value) -> str:
    """A default as it is typed on the command line."""
    return " ".join(map(str, value)) if isinstance(value, list) else str(value)


class QuickDefaults:
    """``name -> (full default, --quick value)`` for an example's options (argparse names)."""

    def __init__(self, table: dict[str, tuple]):
        self.table = table

    def help(self, name: str, text: str = "") -> str:
        """``text`` and the option's two defaults, for ``--help``; where the full default is
        None (worked out later), ``text`` says what it means."""
        full, quick = self.table[name]
        said = text if full is None else f"{text}{'; ' if text else ''}default {_shown(full)}"
        return f"{said} (--quick: {_shown(quick)})"

    def resolve(self, args) -> None:
        """Give each option left out its ``--quick`` value under ``--quick``, else its full
        default."""
        for name, (full, quick) in self.table.items():
            if getattr(args, name) is None:
                setattr(args, name, quick if args.quick else full)
