"""What a Harbor task asks of a run: each phase's network, the backends that can honour it,
its env templates, its MCP servers, and its multi-step reward."""
