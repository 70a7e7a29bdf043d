"""CDK code only. Nothing under lambdas/ or layers/ imports from here, and nothing here runs at Lambda time."""
