"""`route` of a pipeline table: which records of a topic shared by several tables are its
own. Debezium's topic routing SMT (ToLogicalTopicRouter; the deprecated
ByLogicalTableRouter) merges tables into one topic, and some deployments route a whole
database into one: the records then tell their table by the `source` block (full
envelope) or by a field ExtractNewRecordState adds (`add.fields=db,schema,table`:
`__db`, `__schema`, `__table`), and the router adds a field to the Kafka key to keep
keys unique (`key_field`)."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

# What a source name or routed field value may be: printable text without quotes' worries
# (each is a quoted literal in SQL), as long as Redshift's longest identifier.
ROUTE_VALUE = re.compile(r"^[^\x00-\x1f\x7f]{1,127}$")
# Field names as Debezium's JSON converter writes them (sync.config.SOURCE_FIELD).
ROUTE_FIELD = re.compile(r"^[^\W\d][\w$]*$")
# The source block's attributes a route may select on, in the order an identity lists them.
SOURCE_ATTRIBUTES = ("db", "schema", "table")
# The key field each router adds by default (key.enforce.uniqueness=true, its default).
ROUTER_KEY_FIELDS = {
    "io.debezium.transforms.ToLogicalTopicRouter": "__dbz__sourceIdentifier",
    "io.debezium.transforms.ByLogicalTableRouter": "__dbz__physicalTableIdentifier",
}


def _as_list(value: object) -> object:
    return [value] if isinstance(value, str) else value


class RouteConfig(BaseModel):
    """`route = { db = ..., schema = ..., table = ..., field = ..., values = ..., key_field = ... }`:
    a record is the table's when every given selector holds (each a name or a list of names)."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    db: list[str] = []
    schema_: Annotated[list[str], Field(alias="schema")] = []
    table: list[str] = []
    # A field of an unwrapped record (format = "debezium-unwrap" or "row") and its values.
    field: str | None = None
    values: list[str] = []
    # The field the routing SMT adds to the Kafka key (`key.field.name`): a primary-key
    # column read from the Kafka key only, never from the row image.
    key_field: str | None = None

    @field_validator("db", "schema_", "table", "values", mode="before")
    @classmethod
    def _listed(cls, v: object) -> object:
        return _as_list(v)

    @field_validator("db", "schema_", "table", "values")
    @classmethod
    def _names(cls, v: list[str]) -> list[str]:
        for name in v:
            if not ROUTE_VALUE.match(name):
                raise ValueError(f"{name!r} is not a source name (1-127 printable characters)")
        return v

    @field_validator("field", "key_field")
    @classmethod
    def _field(cls, v: str | None) -> str | None:
        if v is not None and not ROUTE_FIELD.match(v):
            raise ValueError(f"{v!r} is not a Debezium field name")
        return v

    @model_validator(mode="after")
    def _selects(self) -> RouteConfig:
        if (self.field is None) != (not self.values):
            raise ValueError("route: field and values go together (the field of an unwrapped record and its values)")
        if not (self.db or self.schema_ or self.table or self.field):
            raise ValueError("route: give db, schema, table (the source block) or field and values")
        return self

    def selectors(self, unwrapped: bool) -> list[tuple[str, list[str]]]:
        """(field, values) pairs: `source` attributes, or (unwrapped) the `__` fields
        ExtractNewRecordState adds for them, then the named field."""
        prefix = "__" if unwrapped else ""
        pairs = [(prefix + name, values) for name, values in zip(SOURCE_ATTRIBUTES, self.source_values) if values]
        return pairs + ([(self.field, self.values)] if self.field else [])

    @property
    def source_values(self) -> tuple[list[str], list[str], list[str]]:
        return self.db, self.schema_, self.table

    @property
    def merges_sources(self) -> bool:
        """Records of several source tables can be the table's: the routing SMT's key field
        keeps them apart, or a selector of the source block (or the `__` field
        ExtractNewRecordState adds for it) lists several names."""
        added = {f"__{name}" for name in SOURCE_ATTRIBUTES}
        named = [*self.source_values, self.values if self.field in added else []]
        return self.key_field is not None or any(len(names) > 1 for names in named)
