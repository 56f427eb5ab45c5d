// Package jvm reads what a Java process runs from its command line, for the
// collectors that name JVMs: every HotSpot/OpenJDK process is comm "java",
// whatever it runs, so the broker, the name server and a consumer look
// alike until their argv is read.
package jvm

import "strings"

// Comm is the comm (/proc/<pid>/comm) of every process started by the java
// launcher; the JVM never renames its first thread.
const Comm = "java"

// optionsWithValue are the java launcher options whose value is the next
// argument (java -help, JDK 8–21); the first argument that is neither an
// option nor such a value is the main class.
var optionsWithValue = map[string]bool{
	"-cp": true, "-classpath": true, "--class-path": true,
	"-p": true, "--module-path": true, "--upgrade-module-path": true,
	"--add-modules": true, "--limit-modules": true, "--enable-native-access": true,
	"--add-reads": true, "--add-exports": true, "--add-opens": true, "--patch-module": true,
	"-d": true, "--describe-module": true, "--source": true,
}

// Main returns what the java launcher runs, from its argv
// (/proc/<pid>/cmdline split at NUL bytes): the main class as given
// (org.apache.rocketmq.broker.BrokerStartup), the class after -m module/,
// or with jar true the file of -jar as given (/opt/app/consumer-app.jar).
// It returns "" when argv names none: a module without a class (its
// descriptor names it, which /proc does not show), an @argfile before the
// class (the launcher reads the class from it), a bare `java`.
func Main(argv []string) (main string, jar bool) {
	for i := 1; i < len(argv); i++ {
		a := argv[i]
		switch {
		case a == "-jar":
			if i+1 < len(argv) {
				return argv[i+1], true
			}
			return "", false
		case a == "-m" || a == "--module":
			if i+1 < len(argv) {
				return moduleClass(argv[i+1]), false
			}
			return "", false
		case strings.HasPrefix(a, "--module="):
			return moduleClass(strings.TrimPrefix(a, "--module=")), false
		case optionsWithValue[a]:
			i++
		case strings.HasPrefix(a, "@"):
			return "", false // an argfile: the rest of the options, and the class, are in it
		case strings.HasPrefix(a, "-"):
			// -Xmx8g, -XX:+UseG1GC, -Dk=v, --add-opens=…: one argument.
		default:
			return a, false
		}
	}
	return "", false
}

// moduleClass reads "module/mainclass".
func moduleClass(v string) string {
	if i := strings.LastIndexByte(v, '/'); i >= 0 {
		return v[i+1:]
	}
	return ""
}

// ShortName names a JVM in a few words: its main class without the package
// (BrokerStartup), or its jar's file name (consumer-app.jar); "" when Main
// finds neither.
func ShortName(argv []string) string {
	main, jar := Main(argv)
	if jar {
		return main[strings.LastIndexByte(main, '/')+1:]
	}
	return main[strings.LastIndexByte(main, '.')+1:]
}
