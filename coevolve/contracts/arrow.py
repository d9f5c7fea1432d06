"""The Arrow side of the contracts: every artifact's rows carry `run` and `round` (the hive path adds
`stage`), and each schema has a version (`storage.schemas` collects them; readers refuse another version).
Imported only where a schema is built, so the config never loads pyarrow."""

from __future__ import annotations

import pyarrow as pa

KEY = [pa.field("run", pa.string(), nullable=False), pa.field("round", pa.int32(), nullable=False)]


def artifact_schema(version: int, *fields: pa.Field) -> pa.Schema:
    return pa.schema([*KEY, *fields], metadata={b"schema_version": str(version).encode()})
