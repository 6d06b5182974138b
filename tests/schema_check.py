"""A JSON Schema checker for the keywords the project's schemas use (type, const, enum,
required, properties, additionalProperties, items, oneOf, minimum, $ref into $defs): small
enough to read, so the tests need no jsonschema package. A keyword it does not know fails
loudly rather than passing unchecked."""

from __future__ import annotations

KNOWN = {"$schema", "$id", "title", "description", "type", "const", "enum", "required", "properties",
         "additionalProperties", "items", "oneOf", "minimum", "$ref", "$defs"}
TYPES = {"object": dict, "array": list, "string": str, "boolean": bool, "null": type(None)}


def _is(value, kind: str) -> bool:
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, TYPES[kind])


def errors(value, schema: dict, root: dict | None = None, where: str = "$") -> list[str]:
    root = root or schema
    unknown = set(schema) - KNOWN
    if unknown:
        raise ValueError(f"{where}: schema keyword(s) this checker does not know: {sorted(unknown)}")
    if "$ref" in schema:
        name = schema["$ref"].removeprefix("#/$defs/")
        return errors(value, root["$defs"][name], root, where)
    found: list[str] = []
    if "type" in schema:
        kinds = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(_is(value, kind) for kind in kinds):
            return [f"{where}: {value!r} is not of type {schema['type']}"]
    if "const" in schema and value != schema["const"]:
        found.append(f"{where}: {value!r} is not {schema['const']!r}")
    if "enum" in schema and value not in schema["enum"]:
        found.append(f"{where}: {value!r} is not one of {schema['enum']}")
    if "minimum" in schema and _is(value, "number") and value < schema["minimum"]:
        found.append(f"{where}: {value!r} is below {schema['minimum']}")
    if "oneOf" in schema:
        matching = [s for s in schema["oneOf"] if not errors(value, s, root, where)]
        if len(matching) != 1:
            found.append(f"{where}: {value!r} matches {len(matching)} of the oneOf alternatives, not 1")
    if isinstance(value, dict):
        for key in schema.get("required", []):
            if key not in value:
                found.append(f"{where}: missing {key!r}")
        properties = schema.get("properties", {})
        extra = schema.get("additionalProperties", True)
        for key, item in value.items():
            if key in properties:
                found += errors(item, properties[key], root, f"{where}.{key}")
            elif extra is False:
                found.append(f"{where}: unexpected {key!r}")
            elif isinstance(extra, dict):
                found += errors(item, extra, root, f"{where}.{key}")
    if isinstance(value, list) and "items" in schema:
        for index, item in enumerate(value):
            found += errors(item, schema["items"], root, f"{where}[{index}]")
    return found
