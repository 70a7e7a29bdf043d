"""Reference Lambda handlers the engine's handlers are compared with at cold start.

Each module is a complete handler file, imported on its own (its folder on ``sys.path``), as Lambda
imports a function's handler.
"""
