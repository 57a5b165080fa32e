"""Reference implementations: the ground truth of hidden tests and the engine behind the
book's figures. One module per chapter, named after what it implements."""
