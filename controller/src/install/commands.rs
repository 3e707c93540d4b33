//! Command lines run in the rescue system, and parsers of their output.
