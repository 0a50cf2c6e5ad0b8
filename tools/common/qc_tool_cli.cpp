#include "qc_tool_cli.h"

#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "qc.h"

namespace qctool {

void init_app(CLI::App& app, const std::string& footer) {
  const std::string version = app.get_name() + " " + qc_version_string();
  app.set_version_flag("--version", version, "print \"" + app.get_name() +
                                                  " <qc version>\" and exit");
  app.set_help_flag("-h,--help", "print this help and exit");
  // As the tools' hand-written parsers did: a repeated option overrides.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.get_formatter()->column_width(28);
  app.footer(footer);
  // A blank line between the description and CLI11's "Usage:" line.
  app.description(app.get_description() + "\n");
}

void parse_or_exit(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help, --version
    std::exit(app.exit(e, std::cout, std::cerr));
  } catch (const CLI::ParseError& e) {
    usage_error(app, e.what());
  }
}

void usage_error(const CLI::App& app, const std::string& message) {
  std::cout.flush();
  std::fflush(stdout);
  std::fprintf(stderr, "%s: %s\n(try '%s --help')\n", app.get_name().c_str(), message.c_str(),
               app.get_name().c_str());
  std::exit(2);
}

std::string with_both_spellings(const std::string& names) {
  std::string out = names;
  for (const std::string& name : split_list(names)) {
    if (name.compare(0, 2, "--") != 0) continue;
    std::string other = name;
    for (size_t i = 2; i < other.size(); ++i) {
      if (other[i] == '_') other[i] = '-';
      else if (other[i] == '-') other[i] = '_';
    }
    if (other != name) out += "," + other;
  }
  return out;
}

std::string first_name(const std::string& names) { return split_list(names).front(); }

CLI::Option* add_size(CLI::App& app, const std::string& names, uint64_t* bytes,
                      const std::string& help) {
  const std::string flag = first_name(names);
  CLI::Option* option = app.add_option_function<std::string>(
      names,
      [=](const std::string& text) {
        std::string why;
        if (!parse_size(text, bytes, &why)) {
          throw CLI::ValidationError(bad_size_message(flag, text, why));
        }
      },
      help);
  return option->type_name("SIZE");
}

std::string bad_size_message(const std::string& flag, const std::string& text,
                             const std::string& why) {
  return "bad size '" + text + "' for " + flag + " (" + why + ")";
}

std::string bad_integer_message(const std::string& flag, const std::string& text,
                                const std::string& lo, const std::string& hi) {
  return "bad value '" + text + "' for " + flag + " (an integer in " + lo + ".." + hi + ")";
}

CLI::Option* add_real(CLI::App& app, const std::string& names, double* out,
                      std::function<bool(double)> in_range, const std::string& range,
                      const std::string& help) {
  const std::string flag = first_name(names);
  CLI::Option* option = app.add_option_function<std::string>(
      names,
      [=](const std::string& text) {
        double v = 0;
        if (!parse_real(text, &v) || !in_range(v)) {
          throw CLI::ValidationError("bad value '" + text + "' for " + flag + " (" + range + ")");
        }
        *out = v;
      },
      help);
  return option->type_name("X");
}

}  // namespace qctool
