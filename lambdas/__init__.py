"""The example app's own Lambda functions, beside its modules in the same code asset: producers that
commit events through ``emit()``, as a user's API would. The engine's handlers (consumers, operator
endpoint) are not here: they come with the engine layer (``outbox.handlers``)."""
