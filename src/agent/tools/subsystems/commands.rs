//! The allow-list of read-only programs: per program, the options known to be read-only and
//! what its operands are. Anything not listed here — another option, an abbreviation of a
//! listed long option (GNU and git accept them), an extra operand — is not judged read-only.
//!
//! Each entry was written from the program's manual with side effects in mind: options that
//! write (`sort -o`, `tree -o`, `file -C`), run programs (`sort --compress-program`,
//! `rg --pre`, `find -exec`), set state (`date -s`), follow symlinks out of the tree
//! (`grep -R`, `find -L`) or read lists of further files (`--files0-from`) are left out.

/// What a program's operands are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operands {
    /// No operands at all.
    None,
    /// Files (each confined to the root).
    Paths,
    /// At most one file (`uniq`: a second operand is an output file).
    OnePath,
    /// Text that is never opened (`echo`, `tr`, `seq`).
    Text,
    /// A pattern first (unless given by `-e`/`-f`), then files (`grep`, `rg`).
    PatternThenPaths,
    /// A filter first, then files (`jq`).
    FilterThenPaths,
    /// Only `+FORMAT` (`date`: any other operand sets the clock).
    DateFormat,
}

/// One program's read-only surface.
#[derive(Debug, Clone, Copy)]
pub struct Spec {
    /// Short options without a value.
    pub flags: &'static str,
    /// Short options taking a text/number value (attached `-n5` or next word).
    pub short_values: &'static str,
    /// Short options taking a file value (confined like an operand).
    pub short_paths: &'static str,
    /// Long options without a value.
    pub long_flags: &'static [&'static str],
    /// Long options taking a text value (`--x=v` or `--x v`).
    pub long_values: &'static [&'static str],
    /// Long options taking a file value.
    pub long_paths: &'static [&'static str],
    /// Long options with an optional `=value` only (`--color[=WHEN]`).
    pub long_optional: &'static [&'static str],
    /// Whether `-NUM` (head/tail) is accepted.
    pub numeric_option: bool,
    /// The operands.
    pub operands: Operands,
}

const fn spec(flags: &'static str, short_values: &'static str, operands: Operands) -> Spec {
    Spec {
        flags,
        short_values,
        short_paths: "",
        long_flags: &[],
        long_values: &[],
        long_paths: &[],
        long_optional: &[],
        numeric_option: false,
        operands,
    }
}

const COMMON_LONG: &[&str] = &["--help", "--version"];

/// The read-only programs and their specs.
pub fn lookup(program: &str) -> Option<Spec> {
    use Operands::*;
    let s = match program {
        "ls" => Spec {
            long_flags: &[
                "--all",
                "--almost-all",
                "--human-readable",
                "--si",
                "--recursive",
                "--reverse",
                "--size",
                "--inode",
                "--directory",
                "--classify",
                "--numeric-uid-gid",
                "--no-group",
                "--group-directories-first",
                "--full-time",
                "--help",
                "--version",
                "--literal",
                "--escape",
                "--quote-name",
            ],
            long_values: &[
                "--sort",
                "--time-style",
                "--width",
                "--block-size",
                "--format",
            ],
            long_optional: &["--color", "--hyperlink", "--indicator-style"],
            ..spec("aAbBcCdfFgGhiklmnNopqQrRsStuUvxX1Z", "wT", Paths)
        },
        "cat" => Spec {
            long_flags: &[
                "--number",
                "--number-nonblank",
                "--show-all",
                "--show-ends",
                "--show-tabs",
                "--show-nonprinting",
                "--squeeze-blank",
                "--help",
                "--version",
            ],
            ..spec("AbeEnstTuv", "", Paths)
        },
        "head" | "tail" => Spec {
            long_values: &["--lines", "--bytes"],
            long_flags: &[
                "--quiet",
                "--silent",
                "--verbose",
                "--zero-terminated",
                "--help",
                "--version",
            ],
            numeric_option: true,
            ..spec("qvz", "nc", Paths)
        },
        "wc" => Spec {
            long_flags: &[
                "--bytes",
                "--chars",
                "--lines",
                "--words",
                "--max-line-length",
                "--help",
                "--version",
            ],
            ..spec("clmwL", "", Paths)
        },
        "grep" | "egrep" | "fgrep" => Spec {
            short_paths: "f",
            long_flags: &[
                "--extended-regexp",
                "--fixed-strings",
                "--basic-regexp",
                "--perl-regexp",
                "--ignore-case",
                "--no-ignore-case",
                "--word-regexp",
                "--line-regexp",
                "--invert-match",
                "--count",
                "--files-with-matches",
                "--files-without-match",
                "--line-number",
                "--no-filename",
                "--with-filename",
                "--only-matching",
                "--quiet",
                "--silent",
                "--no-messages",
                "--recursive",
                "--text",
                "--byte-offset",
                "--null",
                "--null-data",
                "--initial-tab",
                "--help",
                "--version",
            ],
            long_values: &[
                "--regexp",
                "--max-count",
                "--after-context",
                "--before-context",
                "--context",
                "--include",
                "--exclude",
                "--exclude-dir",
                "--label",
                "--binary-files",
            ],
            long_paths: &["--file"],
            long_optional: &["--color", "--colour"],
            ..spec("EFGPiywxvcLlnhHoqsrabIzTUZ", "emABCd", PatternThenPaths)
        },
        "rg" => Spec {
            short_paths: "f",
            long_flags: &[
                "--ignore-case",
                "--smart-case",
                "--case-sensitive",
                "--fixed-strings",
                "--word-regexp",
                "--line-regexp",
                "--invert-match",
                "--count",
                "--files-with-matches",
                "--files-without-match",
                "--line-number",
                "--no-line-number",
                "--no-filename",
                "--with-filename",
                "--only-matching",
                "--quiet",
                "--hidden",
                "--no-ignore",
                "--files",
                "--json",
                "--heading",
                "--no-heading",
                "--vimgrep",
                "--multiline",
                "--text",
                "--stats",
                "--sort-files",
                "--help",
                "--version",
            ],
            long_values: &[
                "--regexp",
                "--max-count",
                "--after-context",
                "--before-context",
                "--context",
                "--glob",
                "--iglob",
                "--type",
                "--type-not",
                "--max-depth",
                "--sort",
                "--sortr",
                "--color",
                "--max-filesize",
            ],
            long_paths: &["--file"],
            ..spec("iSsFwxvclnNoqUa.", "emABCgtTd", PatternThenPaths)
        },
        "pwd" => spec("LP", "", None),
        "true" | "false" | "whoami" | "nproc" | "tty" => Spec {
            long_flags: COMMON_LONG,
            ..spec("", "", None)
        },
        "uptime" => spec("ps", "", None),
        "free" => spec("bkmghltwv", "", None),
        "uname" => Spec {
            long_flags: &["--all", "--kernel-name", "--machine", "--help", "--version"],
            ..spec("asnrvmpio", "", None)
        },
        "id" => spec("gGnruz", "", Text),
        "echo" => spec("neE", "", Text),
        "printf" => spec("", "", Text),
        "which" => spec("a", "", Text),
        "basename" => Spec {
            long_flags: &["--multiple", "--zero"],
            long_values: &["--suffix"],
            ..spec("az", "s", Text)
        },
        "dirname" => spec("z", "", Text),
        "realpath" | "readlink" => spec("efmnqsvzEPL", "", Paths),
        "printenv" => spec("0", "", Text),
        "seq" => spec("w", "sf", Text),
        "tr" => spec("cdstC", "", Text),
        "stat" => Spec {
            long_flags: &[
                "--terse",
                "--dereference",
                "--file-system",
                "--help",
                "--version",
            ],
            long_values: &["--format", "--printf"],
            ..spec("Lft", "c", Paths)
        },
        "du" => Spec {
            long_flags: &[
                "--all",
                "--apparent-size",
                "--human-readable",
                "--summarize",
                "--total",
                "--one-file-system",
                "--bytes",
                "--null",
                "--count-links",
                "--separate-dirs",
                "--si",
                "--help",
                "--version",
            ],
            long_values: &[
                "--max-depth",
                "--exclude",
                "--threshold",
                "--block-size",
                "--time-style",
            ],
            ..spec("abcDhkmsSxl0P", "dtB", Paths)
        },
        "df" => Spec {
            long_flags: &[
                "--human-readable",
                "--all",
                "--inodes",
                "--local",
                "--portability",
                "--print-type",
                "--si",
                "--total",
                "--help",
                "--version",
            ],
            long_values: &["--output", "--type", "--exclude-type", "--block-size"],
            ..spec("ahHiklPTx", "tB", Paths)
        },
        "cut" => Spec {
            long_flags: &[
                "--complement",
                "--only-delimited",
                "--zero-terminated",
                "--help",
                "--version",
            ],
            long_values: &[
                "--bytes",
                "--characters",
                "--fields",
                "--delimiter",
                "--output-delimiter",
            ],
            ..spec("nsz", "bcfd", Paths)
        },
        "diff" => Spec {
            long_flags: &[
                "--brief",
                "--report-identical-files",
                "--unified",
                "--context",
                "--new-file",
                "--ignore-case",
                "--ignore-all-space",
                "--ignore-space-change",
                "--ignore-blank-lines",
                "--text",
                "--side-by-side",
                "--suppress-common-lines",
                "--minimal",
                "--help",
                "--version",
            ],
            long_values: &["--label", "--width", "--exclude"],
            long_optional: &["--color"],
            // not -r: a recursive diff follows symlinks out of the tree
            ..spec("qsuNiwbBEZtTyacp", "UCWx", Paths)
        },
        "cmp" => Spec {
            long_flags: &[
                "--print-bytes",
                "--verbose",
                "--quiet",
                "--silent",
                "--help",
                "--version",
            ],
            long_values: &["--bytes", "--ignore-initial"],
            ..spec("bls", "in", Paths)
        },
        "comm" => Spec {
            long_flags: &[
                "--check-order",
                "--nocheck-order",
                "--total",
                "--zero-terminated",
                "--help",
                "--version",
            ],
            long_values: &["--output-delimiter"],
            ..spec("123z", "", Paths)
        },
        "nl" => spec("p", "bdfhilnsvw", Paths),
        "sha256sum" | "sha1sum" | "sha512sum" | "sha224sum" | "sha384sum" | "md5sum" | "b2sum"
        | "cksum" => Spec {
            long_flags: &[
                "--binary",
                "--text",
                "--tag",
                "--zero",
                "--help",
                "--version",
            ],
            ..spec("btz", "l", Paths)
        },
        "jq" => Spec {
            long_flags: &[
                "--raw-output",
                "--compact-output",
                "--null-input",
                "--slurp",
                "--exit-status",
                "--sort-keys",
                "--join-output",
                "--ascii-output",
                "--monochrome-output",
                "--tab",
                "--raw-input",
                "--help",
                "--version",
            ],
            long_values: &["--indent"],
            ..spec("rcnseSjaMR", "", FilterThenPaths)
        },
        "column" => spec("tnxeJ", "csoNRHWl", Paths),
        "fold" => Spec {
            long_flags: &["--bytes", "--spaces"],
            long_values: &["--width"],
            ..spec("bs", "w", Paths)
        },
        "rev" => spec("", "", Paths),
        "od" => Spec {
            long_flags: &["--output-duplicates", "--help", "--version"],
            long_values: &[
                "--address-radix",
                "--skip-bytes",
                "--read-bytes",
                "--format",
                "--width",
                "--endian",
            ],
            ..spec("bcdfiloxsv", "AjNtwS", Paths)
        },
        "hexdump" => spec("bcCdoxv", "ensL", Paths),
        "xxd" => spec("pucEgiR", "lsgoc", OnePath),
        "strings" => Spec {
            long_flags: &["--all", "--print-file-name", "--help", "--version"],
            long_values: &["--bytes", "--radix", "--encoding"],
            ..spec("afw", "nte", Paths)
        },
        "date" => Spec {
            long_flags: &["--utc", "--universal", "--rfc-email", "--help", "--version"],
            long_values: &["--date", "--rfc-3339"],
            long_paths: &["--reference"],
            long_optional: &["--iso-8601"],
            ..Spec {
                short_paths: "r",
                ..spec("uRI", "d", DateFormat)
            }
        },
        "tree" => Spec {
            long_flags: &[
                "--noreport",
                "--dirsfirst",
                "--prune",
                "--du",
                "--help",
                "--version",
            ],
            long_values: &["--filelimit", "--sort", "--charset", "--gitignore"],
            // not -l: it follows symlinks to directories, out of the tree
            ..spec("adfFiqNQpugshDvtrCAnx", "LPI", Paths)
        },
        "uniq" => Spec {
            long_flags: &[
                "--count",
                "--repeated",
                "--unique",
                "--ignore-case",
                "--zero-terminated",
                "--help",
                "--version",
            ],
            long_values: &["--skip-fields", "--skip-chars", "--check-chars"],
            long_optional: &["--all-repeated", "--group"],
            ..spec("cdDiuz", "fsw", OnePath)
        },
        "sort" => Spec {
            long_flags: &[
                "--ignore-leading-blanks",
                "--dictionary-order",
                "--ignore-case",
                "--general-numeric-sort",
                "--ignore-nonprinting",
                "--month-sort",
                "--human-numeric-sort",
                "--numeric-sort",
                "--random-sort",
                "--reverse",
                "--version-sort",
                "--check",
                "--merge",
                "--stable",
                "--unique",
                "--zero-terminated",
                "--help",
                "--version",
            ],
            long_values: &[
                "--key",
                "--field-separator",
                "--buffer-size",
                "--parallel",
                "--sort",
            ],
            ..spec("bdfgiMhnRrVcCmsuz", "ktS", Paths)
        },
        "file" => Spec {
            long_flags: &[
                "--brief",
                "--mime",
                "--mime-type",
                "--mime-encoding",
                "--dereference",
                "--no-dereference",
                "--keep-going",
                "--raw",
                "--special-files",
                "--uncompress",
                "--print0",
                "--help",
                "--version",
            ],
            long_values: &["--separator", "--exclude"],
            ..spec("bhiLkrsz0N", "Fe", Paths)
        },
        "test" | "[" => spec("", "", Text),
        _ => return Option::None,
    };
    Some(s)
}

/// `find` predicates that only test or print to stdout, and how many values each takes.
pub fn find_predicate(word: &str) -> Option<usize> {
    Some(match word {
        "-print" | "-print0" | "-prune" | "-empty" | "-readable" | "-writable" | "-executable"
        | "-true" | "-false" | "-not" | "!" | "(" | ")" | "-a" | "-o" | "-and" | "-or"
        | "-depth" | "-xdev" | "-mount" | "-nouser" | "-nogroup" | "-quit" | "-ls" => 0,
        "-name" | "-iname" | "-path" | "-ipath" | "-wholename" | "-iwholename" | "-regex"
        | "-iregex" | "-type" | "-xtype" | "-maxdepth" | "-mindepth" | "-size" | "-mtime"
        | "-mmin" | "-atime" | "-amin" | "-ctime" | "-cmin" | "-perm" | "-user" | "-group"
        | "-uid" | "-gid" | "-links" | "-inum" | "-lname" | "-ilname" | "-regextype"
        | "-printf" | "-used" => 1,
        _ => return Option::None,
    })
}

/// `find` predicates whose value is a file (confined).
pub fn find_path_predicate(word: &str) -> bool {
    matches!(word, "-newer" | "-anewer" | "-cnewer" | "-samefile")
}

/// Read-only `git` subcommands and the options accepted for them (exact names only: git
/// accepts abbreviations, which are therefore never ALLOWED).
pub fn git_options(sub: &str) -> Option<(&'static [&'static str], &'static [&'static str])> {
    const LOG_FLAGS: &[&str] = &[
        "--oneline",
        "--stat",
        "--shortstat",
        "--numstat",
        "--name-only",
        "--name-status",
        "--graph",
        "--all",
        "--patch",
        "-p",
        "-u",
        "--decorate",
        "--no-decorate",
        "--reverse",
        "--abbrev-commit",
        "--no-abbrev-commit",
        "--no-color",
        "--color",
        "--first-parent",
        "--no-merges",
        "--merges",
        "--cached",
        "--staged",
        "--summary",
        "--word-diff",
        "--check",
        "--no-ext-diff",
        "--no-textconv",
        "--raw",
        "-w",
        "-b",
        "--ignore-all-space",
        "--ignore-space-change",
        "--full-index",
        "--no-renames",
        "--no-patch",
        "-s",
        "-q",
        "--quiet",
        "--exit-code",
        "--date-order",
        "--topo-order",
        "--source",
        "--relative",
        "-R",
        "--",
    ];
    const LOG_VALUES: &[&str] = &[
        "-n",
        "--max-count",
        "--format",
        "--pretty",
        "--since",
        "--until",
        "--after",
        "--before",
        "--author",
        "--committer",
        "--grep",
        "-S",
        "-G",
        "-U",
        "--unified",
        "--skip",
        "--date",
        "--diff-filter",
        "--abbrev",
        "-L",
    ];
    Some(match sub {
        "status" => (
            &[
                "-s",
                "--short",
                "-b",
                "--branch",
                "--porcelain",
                "--long",
                "-v",
                "--verbose",
                "--ignored",
                "-z",
                "--no-renames",
                "--",
            ],
            &["-u", "--untracked-files", "--porcelain"],
        ),
        "log" | "diff" | "show" | "whatchanged" => (LOG_FLAGS, LOG_VALUES),
        "shortlog" => (
            &[
                "-s",
                "-n",
                "-e",
                "--summary",
                "--numbered",
                "--email",
                "--all",
                "--",
            ],
            &[],
        ),
        "rev-parse" => (
            &[
                "--show-toplevel",
                "--abbrev-ref",
                "--short",
                "--verify",
                "--git-dir",
                "--is-inside-work-tree",
                "--show-prefix",
                "--symbolic-full-name",
                "-q",
                "--quiet",
                "HEAD",
                "--",
            ],
            &[],
        ),
        "ls-files" => (
            &[
                "-c",
                "--cached",
                "-m",
                "--modified",
                "-o",
                "--others",
                "-d",
                "--deleted",
                "-s",
                "--stage",
                "-z",
                "--exclude-standard",
                "-t",
                "--full-name",
                "--",
            ],
            &[],
        ),
        "blame" => (
            &[
                "-l",
                "-s",
                "-e",
                "-w",
                "--porcelain",
                "--line-porcelain",
                "-c",
                "--",
            ],
            &["-L"],
        ),
        "describe" => (
            &["--tags", "--all", "--always", "--long", "--dirty"],
            &["--abbrev", "--match"],
        ),
        "grep" => (
            &[
                "-n",
                "--line-number",
                "-i",
                "--ignore-case",
                "-w",
                "--word-regexp",
                "-v",
                "--invert-match",
                "-l",
                "--files-with-matches",
                "-L",
                "-c",
                "--count",
                "-E",
                "--extended-regexp",
                "-F",
                "--fixed-strings",
                "-P",
                "-h",
                "-H",
                "-I",
                "--cached",
                "--untracked",
                "--no-index",
                "-q",
                "--quiet",
                "--",
            ],
            &["-e", "-A", "-B", "-C", "-m", "--max-count"],
        ),
        "cat-file" => (&["-t", "-s", "-p", "-e"], &[]),
        "ls-tree" => (
            &[
                "-r",
                "-t",
                "-d",
                "-l",
                "--name-only",
                "-z",
                "--full-tree",
                "--",
            ],
            &[],
        ),
        "rev-list" => (
            &["--count", "--all", "--reverse", "--first-parent", "--"],
            &["-n", "--max-count"],
        ),
        "--version" | "version" => (&[], &[]),
        _ => return Option::None,
    })
}
