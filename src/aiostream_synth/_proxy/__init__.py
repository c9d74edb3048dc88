"""The proxy behind ``aiostream-synth serve``: app, upstream client, embedded model, server, CLI."""
