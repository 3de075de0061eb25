"""Appendix B ``ValidateConfig()`` rules, checked one mutation at a time on a valid config."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from backend.seed import TABLE_CONFIGS
from backend.table_rules import date_format_problem, validate_table_config

Config = dict[str, Any]


def base() -> Config:
    return copy.deepcopy(next(c for c in TABLE_CONFIGS if c["name"] == "inventory_items_overview")["config"])


def ds(cfg: Config) -> Config:
    source: Config = cfg["data_source"][0]
    return source


def cols(cfg: Config) -> Config:
    columns: Config = cfg["visual_settings"]["columns"]
    return columns


def test_every_seeded_config_is_valid() -> None:
    for seeded in TABLE_CONFIGS:
        report = validate_table_config(seeded["config"])
        assert report.valid, (seeded["name"], report.errors)
        assert report.warnings == []


def _set(path: Callable[[Config], Config], key: str, value: Any) -> Callable[[Config], None]:
    def mutate(cfg: Config) -> None:
        path(cfg)[key] = value

    return mutate


def _delete(path: Callable[[Config], Config], key: str) -> Callable[[Config], None]:
    def mutate(cfg: Config) -> None:
        del path(cfg)[key]

    return mutate


def _root(cfg: Config) -> Config:
    return cfg


def _order_all(cfg: Config, **overrides: int) -> None:
    """Give every visible column an order (so STRICT_ORDER holds), then apply overrides."""
    for i, (name, column) in enumerate(cols(cfg).items(), start=1):
        if not column.get("hidden"):
            column["order"] = overrides.get(name, i)


ERROR_CASES: list[tuple[str, Callable[[Config], None], str, str]] = [
    ("title missing", _delete(_root, "title"), "title", "REQUIRED"),
    ("widget type", _set(_root, "widget_type", "grid"), "widget_type", "INVALID_VALUE"),
    ("refresh mode", _set(_root, "refresh_mode", "push"), "refresh_mode", "INVALID_VALUE"),
    ("negative width", _set(_root, "width", -1), "width", "INVALID_VALUE"),
    ("string height", _set(_root, "height", "8"), "height", "INVALID_TYPE"),
    ("no data source", _set(_root, "data_source", []), "data_source", "REQUIRED"),
    ("source missing", _set(ds, "source", ""), "data_source[0].source", "REQUIRED"),
    ("source type", _set(ds, "type", "table"), "data_source[0].type", "INVALID_VALUE"),
    ("negative rows", _set(ds, "rows", -5), "data_source[0].rows", "INVALID_VALUE"),
    (
        "filter column format",
        _set(ds, "filters", [{"column": "1bad", "operator": "eq", "value": 1}]),
        "data_source[0].filters[0].column",
        "INVALID_FORMAT",
    ),
    (
        "filter operator",
        _set(ds, "filters", [{"column": "quantity", "operator": "between"}]),
        "data_source[0].filters[0].operator",
        "INVALID_VALUE",
    ),
    (
        "filter operator missing",
        _set(ds, "filters", [{"column": "quantity"}]),
        "data_source[0].filters[0].operator",
        "REQUIRED",
    ),
    (
        "sort direction",
        _set(ds, "sort", [{"column": "quantity", "direction": "up"}]),
        "data_source[0].sort[0].direction",
        "INVALID_VALUE",
    ),
    (
        "sort priority",
        _set(ds, "sort", [{"column": "quantity", "direction": "asc", "priority": -1}]),
        "data_source[0].sort[0].priority",
        "INVALID_VALUE",
    ),
    (
        "join type",
        _set(ds, "joins", [{"table": "products", "type": "outer", "on": "a = b"}]),
        "data_source[0].joins[0].type",
        "INVALID_VALUE",
    ),
    ("join on", _set(ds, "joins", [{"table": "products", "type": "left"}]), "data_source[0].joins[0].on", "REQUIRED"),
    (
        "select column without name",
        lambda c: ds(c)["select"]["columns"].append({"alias": "x"}),
        "data_source[0].select.columns[4].name",
        "REQUIRED",
    ),
    (
        "select alias format",
        lambda c: ds(c)["select"]["columns"].append({"name": "quantity", "alias": "qty-2"}),
        "data_source[0].select.columns[4].alias",
        "INVALID_FORMAT",
    ),
    (
        "foreign table relationship",
        lambda c: ds(c)["select"]["foreign_tables"][0].update(relationship_to="products id"),
        "data_source[0].select.foreign_tables[0].relationship_to",
        "INVALID_FORMAT",
    ),
    (
        "foreign table direction",
        lambda c: ds(c)["select"]["foreign_tables"][0].update(relationship_direction="sideways"),
        "data_source[0].select.foreign_tables[0].relationship_direction",
        "INVALID_VALUE",
    ),
    (
        "nested foreign table",
        lambda c: ds(c)["select"]["foreign_tables"][0].update(
            foreign_tables=[{"table": "", "relationship_from": "a", "relationship_to": "b", "columns": []}]
        ),
        "data_source[0].select.foreign_tables[0].foreign_tables[0].table",
        "REQUIRED",
    ),
    (
        "computed unknown field",
        lambda c: ds(c)["select"]["client_computed_columns"][0].update(expression="quantity - ghost_column"),
        "data_source[0].select.client_computed_columns[0].expression",
        "INVALID_FIELD_REFERENCE",
    ),
    (
        "metric function",
        _set(ds, "metrics", [{"name": "m", "function": "median", "column": "quantity"}]),
        "data_source[0].metrics[0].function",
        "INVALID_VALUE",
    ),
    (
        "metric column and expression",
        _set(
            ds,
            "metrics",
            [
                {
                    "name": "m",
                    "function": "sum",
                    "column": "quantity",
                    "expression": {"operator": "add", "columns": ["a", "b"]},
                }
            ],
        ),
        "data_source[0].metrics[0]",
        "INVALID_VALUE",
    ),
    (
        "metric expression columns",
        _set(
            ds,
            "metrics",
            [{"name": "m", "function": "sum", "expression": {"operator": "multiply", "columns": ["quantity"]}}],
        ),
        "data_source[0].metrics[0].expression.columns",
        "INVALID_VALUE",
    ),
    (
        "group interval",
        _set(ds, "group_by", [{"column": "created_date", "interval": "hour"}]),
        "data_source[0].group_by[0].interval",
        "INVALID_VALUE",
    ),
    (
        "visible ID header",
        lambda c: cols(c)["sku"].update(header="Product ID"),
        "visual_settings.columns.sku.header",
        "VISIBLE_ID_HEADER",
    ),
    ("column type missing", lambda c: cols(c)["sku"].pop("type"), "visual_settings.columns.sku.type", "REQUIRED"),
    ("column type", lambda c: cols(c)["sku"].update(type="text"), "visual_settings.columns.sku.type", "INVALID_VALUE"),
    ("align", lambda c: cols(c)["sku"].update(align="justify"), "visual_settings.columns.sku.align", "INVALID_VALUE"),
    (
        "format type",
        lambda c: cols(c)["quantity"]["format"].update(type="money"),
        "visual_settings.columns.quantity.format.type",
        "INVALID_VALUE",
    ),
    (
        "precision",
        lambda c: cols(c)["quantity"]["format"].update(precision=-2),
        "visual_settings.columns.quantity.format.precision",
        "INVALID_VALUE",
    ),
    (
        "go layout",
        lambda c: cols(c)["updated_date"]["format"].update(format="2006-01-02 15:04"),
        "visual_settings.columns.updated_date.format.format",
        "INVALID_FORMAT",
    ),
    (
        "datetime without format",
        lambda c: cols(c)["updated_date"].pop("format"),
        "visual_settings.columns.updated_date.format",
        "REQUIRED",
    ),
    (
        "editable type",
        lambda c: cols(c)["sku"].update(editable={"type": "slider"}),
        "visual_settings.columns.sku.editable.type",
        "INVALID_VALUE",
    ),
    ("lookup config", lambda c: cols(c)["sku"].update(type="lookup"), "visual_settings.columns.sku.lookup", "REQUIRED"),
    (
        "lookup fields",
        lambda c: cols(c)["sku"].update(type="lookup", lookup={"entity": "inventory.products", "label_column": "name"}),
        "visual_settings.columns.sku.lookup.value_column",
        "REQUIRED",
    ),
    (
        "link url",
        lambda c: cols(c)["sku"].update(link={"label": "Open"}),
        "visual_settings.columns.sku.link.url",
        "REQUIRED",
    ),
    (
        "link label",
        lambda c: cols(c)["sku"].update(link={"url": "/p/{id}"}),
        "visual_settings.columns.sku.link",
        "REQUIRED",
    ),
    (
        "id column label link",
        lambda c: cols(c).update(
            product_id={
                "name": "product_id",
                "header": "Product",
                "type": "uuid",
                "link": {"url": "/p", "label_column": "sku"},
            }
        ),
        "visual_settings.columns.product_id.link.label_column",
        "INVALID_VALUE",
    ),
    ("order range", lambda c: _order_all(c, sku=5000), "visual_settings.columns.sku.order", "INVALID_VALUE"),
    ("strict order", lambda c: cols(c)["sku"].update(order=3), "visual_settings.columns", "STRICT_ORDER"),
    (
        "page size",
        lambda c: c["visual_settings"]["pagination"].update(page_sizes=[10, 0]),
        "visual_settings.pagination.page_sizes[1]",
        "INVALID_VALUE",
    ),
    (
        "conditional formatting",
        lambda c: c["visual_settings"].update(conditional_formatting=[{"column": "quantity", "condition": "below"}]),
        "visual_settings.conditional_formatting[0].condition",
        "INVALID_VALUE",
    ),
    (
        "row action type",
        lambda c: c["visual_settings"].update(
            row_actions={"go": {"name": "go", "label": "Go", "action_type": "teleport"}}
        ),
        "visual_settings.row_actions.go.action_type",
        "INVALID_VALUE",
    ),
    (
        "link action url",
        lambda c: c["visual_settings"].update(
            table_actions={"go": {"name": "go", "label": "Go", "action_type": "link"}}
        ),
        "visual_settings.table_actions.go.url",
        "REQUIRED",
    ),
    ("missing visual settings", lambda c: cols(c).pop("sku"), "visual_settings.columns.sku", "MISSING_VISUAL_SETTINGS"),
    (
        "permission action",
        lambda c: c["permissions"].update(actions=["view", "destroy"]),
        "permissions.actions[1]",
        "INVALID_VALUE",
    ),
]


@pytest.mark.parametrize(("case", "mutate", "field", "code"), ERROR_CASES, ids=[c[0] for c in ERROR_CASES])
def test_each_rule_reports_its_field_and_code(
    case: str, mutate: Callable[[Config], None], field: str, code: str
) -> None:
    cfg = base()
    mutate(cfg)
    report = validate_table_config(cfg)
    assert not report.valid
    assert (field, code) in {(e.field, e.code) for e in report.errors}, report.errors


def test_strict_order_lists_both_groups() -> None:
    cfg = base()
    cols(cfg)["sku"]["order"] = 3
    (error,) = [e for e in validate_table_config(cfg).errors if e.code == "STRICT_ORDER"]
    assert "with order: sku" in error.message
    assert (
        "without order: available, product_name, quantity, reserved_quantity, updated_date, warehouse_name"
        in error.message
    )


def test_exemptions_and_warnings() -> None:
    cfg = base()
    cols(cfg)["id"]["order"] = 7  # hidden column with an order: warning only
    cfg["visual_settings"]["pagination"]["default_page_size"] = 30  # not among the sizes: warning only
    cols(cfg)["sku"]["link"] = {"url": "/p/{id}", "label_column": "warehouse_name"}
    del cols(cfg)["warehouse_name"]  # used as a link label_column: exempt from MISSING_VISUAL_SETTINGS
    report = validate_table_config(cfg)
    assert report.valid, report.errors
    assert {w.field for w in report.warnings} == {
        "visual_settings.columns.id.order",
        "visual_settings.pagination.default_page_size",
    }


def test_charts_skip_visual_settings() -> None:
    chart = copy.deepcopy(next(c for c in TABLE_CONFIGS if c["name"] == "monthly_sales_chart")["config"])
    chart["visual_settings"] = {"columns": {"total_amount": {"name": "total_amount", "header": "ID"}}}
    assert validate_table_config(chart).valid
    chart["widget_type"] = "table"
    codes = {e.code for e in validate_table_config(chart).errors}
    assert {"VISIBLE_ID_HEADER", "MISSING_VISUAL_SETTINGS"} <= codes


def test_computed_expressions_accept_helpers_methods_literals_and_dotted_names() -> None:
    cfg = base()
    computed = ds(cfg)["select"]["client_computed_columns"]
    computed[0]["expression"] = (
        "hasValue(product_name) && round(quantity / 2).toFixed(1) != 'ghost text' ? true : null || products.sku"
    )
    ds(cfg)["select"]["columns"].append({"name": "sku", "alias": "products_sku"})
    cols(cfg)["products_sku"] = {"name": "products_sku", "header": "SKU 2", "type": "string"}
    assert validate_table_config(cfg).valid, validate_table_config(cfg).errors


def test_not_an_object() -> None:
    report = validate_table_config(["not", "a", "config"])
    assert [(e.field, e.code) for e in report.errors] == [("config", "INVALID_TYPE")]


@pytest.mark.parametrize(
    "fmt", ["yyyy-MM-dd", "MM/dd/yyyy hh:mm a", "dd.MM.yyyy", "EEEE, MMMM do yyyy", "yyyy-MM-dd'T'HH:mm:ss zzz"]
)
def test_date_fns_formats_pass(fmt: str) -> None:
    assert date_format_problem(fmt) is None


@pytest.mark.parametrize("fmt", ["2006-01-02", "15:04:05", "Jan 02", "yyyy-MM-dd %H", "YYYY-MM-DD", "yyyy 'oops"])
def test_other_formats_fail(fmt: str) -> None:
    assert date_format_problem(fmt) is not None


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (_set(_root, "title", None), "title"),
        (_set(ds, "source", None), "data_source[0].source"),
        (
            lambda cfg: ds(cfg)["select"]["foreign_tables"][0].update(relationship_to=None),
            "data_source[0].select.foreign_tables[0].relationship_to",
        ),
    ],
)
def test_a_required_field_set_to_null_is_missing(mutate: Callable[[Config], None], field: str) -> None:
    """JSON ``null`` is what Go decodes to ``""``: the field is missing (the backend's save
    took ``"source": null`` until the tools' stricter copy of these rules was folded in)."""
    cfg = base()
    mutate(cfg)
    report = validate_table_config(cfg)
    assert [(e.field, e.code) for e in report.errors] == [(field, "REQUIRED")]


def test_a_required_field_of_another_type_is_one_type_error() -> None:
    cfg = base()
    ds(cfg)["source"] = 7
    report = validate_table_config(cfg)
    assert [(e.field, e.code, e.message) for e in report.errors] == [
        ("data_source[0].source", "INVALID_TYPE", "must be a string")
    ]


def test_the_tools_report_is_the_backends_on_corrupted_configs() -> None:
    """The tools check a config with these rules before they call the backend: on every
    corruption of every seeded config (seeded, the same each run) the tools' report is
    the backend's, and neither raises. The tools' old copy of the rules disagreed about 13
    verdicts of 7,777 such configs and raised on six (``visual_settings.columns`` as a list)."""
    import random

    from agenttools.tables.config_rules import validate_table_config as tools_check

    junk: list[Any] = [None, 1, -1, "x", "", [], {}, "a b", True, 3.5, [1, "a"], {"k": 1}]
    rng = random.Random(20261127)

    def paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        found = [prefix]
        if isinstance(value, dict):
            for k, v in value.items():
                found += paths(v, (*prefix, k))
        elif isinstance(value, list):
            for i, v in enumerate(value):
                found += paths(v, (*prefix, i))
        return found

    checked = 0
    for seeded in TABLE_CONFIGS:
        for _ in range(60):
            cfg = copy.deepcopy(seeded["config"])
            for _ in range(rng.randint(1, 3)):
                *parents, last = rng.choice([p for p in paths(cfg) if p])
                target: Any = cfg
                for key in parents:
                    target = target[key] if isinstance(target, (dict, list)) else None
                if isinstance(target, dict) and rng.random() < 0.2:
                    target.pop(last, None)
                elif isinstance(target, (dict, list)) and (isinstance(target, dict) or last < len(target)):
                    target[last] = rng.choice(junk)
            backend_report = validate_table_config(cfg)
            tools_report = tools_check(cfg)
            assert tools_report.errors == [e.as_dict() for e in backend_report.errors]
            assert tools_report.warnings == [w.as_dict() for w in backend_report.warnings]
            assert tools_report.valid == backend_report.valid
            checked += 1
    assert checked == 60 * len(TABLE_CONFIGS)
