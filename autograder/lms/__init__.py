"""The files learning-management systems import grades from, one module per system.

``table`` reads a roster file in its own dialect and writes it back the same way;
``sheet`` fills a gradebook file's chapter columns, students matched on ids only;
``canvas``, ``moodle`` and ``blackboard`` say what each system's file looks like (and
``moodle`` writes the feedback zip). ``autograder.export`` is the command that uses them.
"""
