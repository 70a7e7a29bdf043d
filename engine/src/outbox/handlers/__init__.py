"""The Lambda entry points the construct wires (``outbox.handlers.<name>.handler``), generic over the
application: each loads the application's catalog named by ``SUBSCRIPTIONS`` from the function code."""
