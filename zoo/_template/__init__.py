"""Template for a new model family: `zoo new-model NAME` copies this folder to zoo/NAME,
renaming mymodel/MyModel. See CONTRIBUTING.md."""
