"""The command line: ``susurrus transcribe``, ``stream``, ``bench``, ``serve``, ``serve-ray``, ``client``."""
