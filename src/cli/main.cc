// The `tfm` command: one subcommand per file, each registering itself on the app.
#include <CLI/CLI.hpp>
#include <iostream>

#include "cli/commands.h"
#include "tfm/error.h"

int main(int argc, char** argv) {
  CLI::App app{"tfm: Hugging Face causal language models in C++, compiled per input shape"};
  app.require_subcommand(1);
  tfm::cli::add_all_commands(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const tfm::Error& e) {
    std::cerr << "tfm: error: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    // What a library throws (std::filesystem on an unusable path, an allocation refused): said,
    // with rc 1, never an abort.
    std::cerr << "tfm: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
