package jvm

import (
	"strings"
	"testing"
)

// TestMainClass guards the launcher's argv as RocketMQ's scripts, Spring Boot
// and module launches write it: options with and without values skipped,
// -jar, -m and --module=, and what names no class.
func TestMainClass(t *testing.T) {
	broker := []string{"/usr/lib/jvm/java-11/bin/java", "-server", "-Xms8g", "-XX:+UseG1GC", "-cp", ".:/opt/rocketmq/conf:/opt/rocketmq/lib/*",
		"-Drocketmq.home.dir=/opt/rocketmq", "org.apache.rocketmq.broker.BrokerStartup", "-c", "/opt/rocketmq/conf/broker.conf"}
	for _, tc := range []struct {
		argv  []string
		main  string
		jar   bool
		short string
	}{
		{broker, "org.apache.rocketmq.broker.BrokerStartup", false, "BrokerStartup"},
		{[]string{"java", "--class-path", "lib/*", "--add-opens", "java.base/java.nio=ALL-UNNAMED", "com.example.Consumer"}, "com.example.Consumer", false, "Consumer"},
		{[]string{"java", "--module=rocketmq.namesrv/org.apache.rocketmq.namesrv.NamesrvStartup"}, "org.apache.rocketmq.namesrv.NamesrvStartup", false, "NamesrvStartup"},
		{[]string{"java", "-m", "app/com.example.Main"}, "com.example.Main", false, "Main"},
		{[]string{"java", "-m", "app"}, "", false, ""},
		{[]string{"java", "-Xmx2g", "-jar", "/opt/app/consumer-app.jar", "--spring.profiles.active=prod"}, "/opt/app/consumer-app.jar", true, "consumer-app.jar"},
		{[]string{"java", "-jar"}, "", false, ""},
		{[]string{"java", "-cp"}, "", false, ""},
		{[]string{"java", "@/opt/rocketmq/broker.args"}, "", false, ""},
		{[]string{"java", "@/opt/jvm.args", "com.example.Main"}, "", false, ""},
		{[]string{"java", "Main"}, "Main", false, "Main"},
		{[]string{"java"}, "", false, ""},
		{nil, "", false, ""},
	} {
		main, jar := Main(tc.argv)
		if main != tc.main || jar != tc.jar {
			t.Errorf("Main(%q) = %q, %v; want %q, %v", tc.argv, main, jar, tc.main, tc.jar)
		}
		if got := ShortName(tc.argv); got != tc.short {
			t.Errorf("ShortName(%q) = %q, want %q", tc.argv, got, tc.short)
		}
	}
}

// FuzzMain: any command line gives an argument of it, or a part of one,
// without panicking.
func FuzzMain(f *testing.F) {
	f.Add("java\x00-cp\x00lib/*\x00org.apache.rocketmq.broker.BrokerStartup")
	f.Add("java\x00-jar\x00/opt/app.jar")
	f.Add("java\x00--module=m/a.B")
	f.Fuzz(func(t *testing.T, cmdline string) {
		argv := strings.Split(cmdline, "\x00")
		main, _ := Main(argv)
		short := ShortName(argv)
		if !strings.Contains(cmdline, main) || !strings.Contains(main, short) {
			t.Errorf("Main(%q) = %q, ShortName %q: not from the command line", argv, main, short)
		}
	})
}
