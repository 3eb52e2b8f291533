"""tradegraph agent package: evidence layer, analysts and prompts."""
