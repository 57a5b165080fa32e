"""nbgrader's check of each cell's nbgrader metadata, with its JSON schema checked once.

nbgrader's ``CheckCellMetadata`` validates every cell's metadata with ``jsonschema.validate``,
which first checks the schema itself against JSON Schema's metaschema, on every cell of
every notebook: about a tenth of a second per submission, twice (before and after running
it). :class:`CheckCellMetadataOnce` makes the same checks (schema version, the schema, unique
grade ids, nbgrader's rules on cell types) with a validator built, and its schema checked,
once per process. It raises the errors nbgrader's raises, and a notebook whose metadata a
student corrupted fails as it did (``tests/test_grading_switches.py``).
"""

import functools
import json
import traceback

import jsonschema
from nbgrader.nbgraderformat import MetadataValidator, ValidationError
from nbgrader.nbgraderformat.common import SchemaTooNewError, SchemaTooOldError
from nbgrader.preprocessors import CheckCellMetadata


@functools.lru_cache(maxsize=4)
def _schema_validator(schema_json: str):
    schema = json.loads(schema_json)
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)  # what jsonschema.validate does on every call
    return cls(schema)


class OnceCheckedValidator(MetadataValidator):
    """nbgrader's metadata validator (the current schema) with a validator built once."""

    def validate_cell(self, cell) -> None:
        if "nbgrader" not in cell.metadata:
            return
        meta = cell.metadata["nbgrader"]
        version = meta.get("schema_version", 0)
        if version < self.schema_version:
            raise SchemaTooOldError(
                f"Outdated schema version: {version} (expected {self.schema_version})",
                version,
                self.schema_version,
            )
        if version > self.schema_version:
            raise SchemaTooNewError(
                f"Schema version is too new: {version} (expected {self.schema_version})",
                version,
                self.schema_version,
            )
        validator = _schema_validator(json.dumps(self.schema, sort_keys=True))
        error = jsonschema.exceptions.best_match(validator.iter_errors(meta))
        if error is not None:
            raise error


class CheckCellMetadataOnce(CheckCellMetadata):
    """``CheckCellMetadata`` with :class:`OnceCheckedValidator`; it logs and raises as
    nbgrader's does."""

    def preprocess(self, nb, resources):
        try:
            OnceCheckedValidator().validate_nb(nb)
        except ValidationError:
            self.log.error(traceback.format_exc())
            message = "Notebook failed to validate; the nbgrader metadata may be corrupted."
            self.log.error(message)
            raise ValidationError(message) from None
        return nb, resources
