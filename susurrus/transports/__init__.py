"""Ways results leave susurrus: file writers and streaming transports."""
