"""Feedback that teaches without giving the hidden tests away.

nbgrader's feedback shows each test cell with its outputs. A failing hidden test would
show its own code in the traceback; this preprocessor keeps only the error's name and
message in test cells (the course's checks put what was seen, what was expected and the
likely cause in the message).
"""

from nbconvert.preprocessors import Preprocessor
from traitlets import Bool


class ShortTracebacks(Preprocessor):
    """In graded test cells, replace each traceback with ``ErrorName: message``."""

    enabled = Bool(True).tag(config=True)  # nbgrader registers preprocessors as they are

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type == "code" and cell.metadata.get("nbgrader", {}).get("grade"):
            for output in cell.get("outputs", []):
                if output.get("output_type") == "error":
                    output["traceback"] = [
                        f"{output.get('ename', 'Error')}: {output.get('evalue', '')}"
                    ]
        return cell, resources
