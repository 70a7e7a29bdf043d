"""Lambda handlers, one folder per function. Thin: parse, then call the engine in layers/."""
