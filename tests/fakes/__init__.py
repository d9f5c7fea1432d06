"""Named fakes for the tests: small local servers standing in for outside services (AppWorld, OpenAI-compatible)."""
