"""The pages: thin views over the services and selectors, their presenters and URL patterns."""
