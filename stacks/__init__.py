"""CDK code only. Nothing in lambdas/ or layers/ imports from here, and nothing here runs at Lambda time."""
