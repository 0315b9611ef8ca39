"""The command line: option parsing and output policy; the work is in the pipeline."""
