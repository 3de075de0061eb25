"""The table-configuration rules of Ichor's ``ValidateConfig()`` (reference Appendix B),
which the backend's write and the agent's tools both run.

In the Go original the table tools and the API's save called one package
(``business/sdk/tablebuilder``). Two copies of these rules drifted here: on 7,777 configs
(the tests' own and random corruptions of them) they disagreed about 13 verdicts — a
preview the save then refused, a refusal the save would have taken — and the tools' copy
crashed on six. So there is one: ``validation`` (the rules), ``reader`` (typed reads that
turn a wrong type into an error and go on), ``date_formats`` (a column's date-fns format).

It imports nothing of ours outside this package, and ``backend/__init__`` loads nothing on
import, so an agent process that checks a config never loads the backend's routes or data.
"""

from __future__ import annotations

from backend.table_rules.date_formats import date_format_problem
from backend.table_rules.reader import TableConfigError, TableConfigReport, TableConfigWarning
from backend.table_rules.validation import COLUMN_TYPES, validate_table_config

__all__ = [
    "COLUMN_TYPES",
    "TableConfigError",
    "TableConfigReport",
    "TableConfigWarning",
    "date_format_problem",
    "validate_table_config",
]
