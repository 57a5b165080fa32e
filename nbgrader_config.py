"""nbgrader reads this file when run from the repository root, so plain nbgrader commands
(``nbgrader generate_assignment 04_dot_product_attention``) use the course's settings:
source in solutions/, release in notebooks/. The settings live in autograder/."""

from autograder.nbgrader_settings import configure

configure(get_config())  # noqa: F821 (get_config is provided by traitlets)
