/*
 * fake_pyxis.c - a SPANK plugin that accepts pyxis's container options, for tests only.
 *
 * It RUNS NO CONTAINER: there is no enroot/pyxis on the test machine, so every task runs on
 * the host. What it does instead:
 *   - registers pyxis's options (--container-image, --container-mounts, --container-name,
 *     --container-workdir, --container-env, --container-writable, --container-mount-home,
 *     --no-container-mount-home) with spank_option_register() in slurm_spank_init, so srun,
 *     sbatch and salloc all accept them (a static spank_options[] table only works for srun);
 *   - on the node, once per step (slurm_spank_user_init), checks what pyxis would refuse and
 *     fails the step with "pyxis: ..." on the step's stderr:
 *       * an empty value, a container name holding '/';
 *       * an image that is a path (starts with '/' or '.') but not an existing regular file;
 *       * an image whose first component is a registry host (has '.' or ':', or is localhost)
 *         but has no '#': enroot would try to pull it from docker.io and fail;
 *       * a mount (SRC[:DST[:FLAGS]], comma separated, SRC relative to the job's cwd) whose
 *         source does not exist, or an empty SRC/DST;
 *       * a workdir that does not exist (no container: the workdir is a host path);
 *   - in every task (slurm_spank_task_init): chdir to the workdir, export the values as
 *     FAKE_PYXIS_IMAGE, _MOUNTS, _NAME, _WORKDIR, _ENV, _WRITABLE (1), _MOUNT_HOME (1/0) (and
 *     unset the ones not given, so values never leak in from the submitting shell), and append
 *     one JSON line per task to the record file: $FAKE_PYXIS_RECORD from the job environment,
 *     else the plugstack.conf argument record=PATH (cluster.sh sets it). Steps without any
 *     container option are neither checked nor recorded.
 *   - named containers, as pyxis keeps them (NVIDIA/pyxis pyxis_slurmstepd.c at a35027cf2ffa,
 *     slurm_spank_user_init; tests/name.bats at 5a7d9007bb4d): --container-name=NAME is the
 *     enroot container pyxis_<jobid>_<NAME> (container_scope=job, pyxis's default) or
 *     pyxis_<NAME> (container_scope=global); when it exists it is used as it is and the image
 *     is NOT imported (whatever --container-image says), else it is made from the image, and a
 *     name that does not exist without an image fails the step. The containers are folders
 *     <store>/<container> holding the file `image` (the image they were made from), where
 *     <store> is ENROOT_DATA_PATH from the job environment (the enroot stand-in's `list` and
 *     `remove` read the same folder); without it nothing is kept, as an unnamed container.
 *     The scope is the plugstack.conf argument container_scope=job|global, or
 *     FAKE_PYXIS_CONTAINER_SCOPE in the job environment (tests). The record and the task
 *     environment say which container ran (FAKE_PYXIS_CONTAINER), whether it was reused
 *     ("reused") and the image it was made from (FAKE_PYXIS_IMAGE). Job-scoped containers are
 *     not removed at the job's end here (pyxis's epilog does that); a test gives each job's
 *     store a temporary folder.
 *
 * Build: gcc -shared -fPIC -o fake_pyxis.so fake_pyxis.c   (needs libslurm-dev's spank.h)
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <slurm/spank.h>

SPANK_PLUGIN(fake_pyxis, 1);

enum { O_IMAGE, O_MOUNTS, O_NAME, O_WORKDIR, O_ENV, O_WRITABLE, O_HOME, O_NO_HOME, N_OPTS };

/* value of each option, NULL when not given; flags hold "1". In the remote context Slurm may
 * call the callbacks more than once per option: the last value wins (as with srun's options). */
static char *val[N_OPTS];
static int step_refused; /* set in user_init, makes every task fail in task_init */
static char *record_default; /* plugstack.conf: record=PATH */
static int scope_global;      /* plugstack.conf: container_scope=global */
static char container[512];   /* the enroot container of a named step, "" when unnamed */
static int reused;            /* the named container existed: its image, no import */
static char *used_image;      /* the image the container was made from (reused: the old one) */

static int on_option(int v, const char *arg, int remote);

static struct spank_option opts[] = {
	{"container-image", "[USER@][REGISTRY#]IMAGE[:TAG]|PATH",
	 "[fake pyxis] image to run in (no container is run)", 1, O_IMAGE, on_option},
	{"container-mounts", "SRC:DST[:FLAGS][,SRC:DST...]",
	 "[fake pyxis] bind mounts; every SRC must exist", 1, O_MOUNTS, on_option},
	{"container-name", "NAME", "[fake pyxis] container name", 1, O_NAME, on_option},
	{"container-workdir", "PATH", "[fake pyxis] working directory (a host path here)", 1,
	 O_WORKDIR, on_option},
	{"container-env", "NAME[,NAME...]", "[fake pyxis] variables to take from the host", 1,
	 O_ENV, on_option},
	{"container-writable", NULL, "[fake pyxis] writable container filesystem", 0, O_WRITABLE,
	 on_option},
	{"container-mount-home", NULL, "[fake pyxis] bind-mount the home directory", 0, O_HOME,
	 on_option},
	{"no-container-mount-home", NULL, "[fake pyxis] do not bind-mount the home directory", 0,
	 O_NO_HOME, on_option},
	SPANK_OPTIONS_TABLE_END};

static const char *env_name[N_OPTS] = {
	"FAKE_PYXIS_IMAGE", "FAKE_PYXIS_MOUNTS", "FAKE_PYXIS_NAME", "FAKE_PYXIS_WORKDIR",
	"FAKE_PYXIS_ENV",   "FAKE_PYXIS_WRITABLE", "FAKE_PYXIS_MOUNT_HOME", NULL};

static int on_option(int v, const char *arg, int remote)
{
	(void)remote;
	if (v < 0 || v >= N_OPTS)
		return -1;
	if (v == O_HOME || v == O_NO_HOME) { /* one setting, the last flag wins */
		free(val[O_HOME]);
		val[O_HOME] = strdup(v == O_HOME ? "1" : "0");
		return 0;
	}
	if (v == O_WRITABLE)
		arg = "1";
	else if (arg == NULL)
		arg = "";
	free(val[v]);
	val[v] = strdup(arg);
	return val[v] ? 0 : -1;
}

static int any_container_option(void)
{
	for (int i = 0; i < N_OPTS; i++)
		if (val[i] != NULL)
			return 1;
	return 0;
}

int slurm_spank_init(spank_t sp, int ac, char **av)
{
	for (int i = 0; i < ac; i++) {
		if (strncmp(av[i], "record=", 7) == 0 && av[i][7] != '\0')
			record_default = strdup(av[i] + 7);
		if (strcmp(av[i], "container_scope=global") == 0)
			scope_global = 1;
	}
	switch (spank_context()) {
	case S_CTX_LOCAL:
	case S_CTX_ALLOCATOR:
	case S_CTX_REMOTE:
		break;
	default:
		return 0;
	}
	for (int i = 0; opts[i].name != NULL; i++)
		if (spank_option_register(sp, &opts[i]) != ESPANK_SUCCESS) {
			slurm_error("fake_pyxis: cannot register --%s", opts[i].name);
			return -1;
		}
	return 0;
}

/* A path as the task will see it: relative paths are taken from the job's cwd ($PWD). */
static void resolve(spank_t sp, const char *path, char *out, size_t len)
{
	char cwd[PATH_MAX] = "";
	if (path[0] != '/' && spank_getenv(sp, "PWD", cwd, sizeof(cwd)) == ESPANK_SUCCESS)
		snprintf(out, len, "%s/%s", cwd, path);
	else
		snprintf(out, len, "%s", path);
}

/* 0 when every SRC[:DST[:FLAGS]] entry is well formed and SRC exists, else -1 (reported) */
static int check_mounts(spank_t sp, const char *mounts)
{
	char *copy = strdup(mounts), *save = NULL, *entry;
	int rc = 0;
	if (copy == NULL)
		return -1;
	if (*mounts == '\0') {
		slurm_error("pyxis: --container-mounts: empty value");
		rc = -1;
	}
	for (entry = strtok_r(copy, ",", &save); entry != NULL; entry = strtok_r(NULL, ",", &save)) {
		char *colon = strchr(entry, ':');
		char src[PATH_MAX], full[PATH_MAX];
		struct stat st;
		size_t n = colon ? (size_t)(colon - entry) : strlen(entry);
		if (n == 0 || (colon != NULL && (colon[1] == '\0' || colon[1] == ':'))) {
			slurm_error("pyxis: --container-mounts: invalid mount entry '%s' "
				    "(expected SRC:DST[:FLAGS])", entry);
			rc = -1;
			continue;
		}
		snprintf(src, sizeof(src), "%.*s", (int)n, entry);
		resolve(sp, src, full, sizeof(full));
		if (stat(full, &st) != 0) {
			slurm_error("pyxis: --container-mounts: mount source %s does not exist "
				    "(%s): %s", src, entry, strerror(errno));
			rc = -1;
		}
	}
	free(copy);
	return rc;
}

static int check_image(spank_t sp, const char *image)
{
	char full[PATH_MAX];
	struct stat st;
	const char *slash, *hash;
	size_t n;
	if (*image == '\0') {
		slurm_error("pyxis: --container-image: empty value");
		return -1;
	}
	if (image[0] == '/' || image[0] == '.') { /* a squashfs file */
		resolve(sp, image, full, sizeof(full));
		if (stat(full, &st) != 0 || !S_ISREG(st.st_mode)) {
			slurm_error("pyxis: --container-image: %s is not an existing squashfs file",
				    image);
			return -1;
		}
		return 0;
	}
	hash = strchr(image, '#');
	slash = strchr(image, '/');
	if (hash != NULL || slash == NULL)
		return 0;
	n = (size_t)(slash - image);
	if (memchr(image, '.', n) || memchr(image, ':', n) ||
	    (n == 9 && strncmp(image, "localhost", 9) == 0)) {
		slurm_error("pyxis: --container-image=%s would be pulled from docker.io "
			    "(enroot needs REGISTRY#IMAGE, e.g. %.*s#%s)", image, (int)n, image,
			    slash + 1);
		return -1;
	}
	return 0;
}

/* The named container of the step: reuse it when it exists, else make it from the image. */
static int named_container(spank_t sp)
{
	char store[PATH_MAX] = "", scope[32] = "", dir[PATH_MAX], file[PATH_MAX + 16], old[4096];
	uint32_t job = 0;
	int global = scope_global;
	FILE *f;
	ssize_t n;
	int fd;
	if (spank_getenv(sp, "FAKE_PYXIS_CONTAINER_SCOPE", scope, sizeof(scope)) == ESPANK_SUCCESS)
		global = strcmp(scope, "global") == 0;
	spank_get_item(sp, S_JOB_ID, &job);
	if (global)
		snprintf(container, sizeof(container), "pyxis_%s", val[O_NAME]);
	else
		snprintf(container, sizeof(container), "pyxis_%u_%s", job, val[O_NAME]);
	used_image = val[O_IMAGE];
	if (spank_getenv(sp, "ENROOT_DATA_PATH", store, sizeof(store)) != ESPANK_SUCCESS ||
	    store[0] == '\0')
		return 0;
	snprintf(dir, sizeof(dir), "%s/%s", store, container);
	snprintf(file, sizeof(file), "%s/image", dir);
	fd = open(file, O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		n = read(fd, old, sizeof(old) - 1);
		close(fd);
		old[n > 0 ? n : 0] = '\0';
		reused = 1;
		used_image = strdup(old);
		slurm_info("pyxis: reusing existing container filesystem");
		return 0;
	}
	if (val[O_IMAGE] == NULL) {
		slurm_error("pyxis: error: a container with name \"%s\" does not exist, and "
			    "--container-image is not set", val[O_NAME]);
		return -1;
	}
	if ((mkdir(store, 0755) != 0 && errno != EEXIST) || (mkdir(dir, 0755) != 0 && errno != EEXIST) ||
	    (f = fopen(file, "w")) == NULL) {
		slurm_error("pyxis: cannot create container %s in %s: %s", container, store,
			    strerror(errno));
		return -1;
	}
	fputs(val[O_IMAGE], f);
	fclose(f);
	return 0;
}

/* Checks run once per step and node (so each message appears once). A failure here would
 * only print "launch failed" while srun still exits 0 (Slurm 22.05), so it is remembered and
 * every task fails in task_init instead, as a pyxis failure in a task hook does. */
int slurm_spank_user_init(spank_t sp, int ac, char **av)
{
	int rc = 0;
	char full[PATH_MAX];
	struct stat st;
	(void)ac;
	(void)av;
	if (!spank_remote(sp) || !any_container_option())
		return 0;
	for (int i = 0; i < N_OPTS; i++)
		if (val[i] != NULL && *val[i] == '\0' && i != O_MOUNTS) {
			slurm_error("pyxis: --%s: empty value", opts[i].name);
			rc = -1;
		}
	if (val[O_IMAGE] != NULL && *val[O_IMAGE] != '\0' && check_image(sp, val[O_IMAGE]) != 0)
		rc = -1;
	if (val[O_NAME] != NULL && strchr(val[O_NAME], '/') != NULL) {
		slurm_error("pyxis: --container-name=%s: a name cannot contain '/'", val[O_NAME]);
		rc = -1;
	}
	if (val[O_MOUNTS] != NULL && check_mounts(sp, val[O_MOUNTS]) != 0)
		rc = -1;
	if (val[O_WORKDIR] != NULL && *val[O_WORKDIR] != '\0') {
		resolve(sp, val[O_WORKDIR], full, sizeof(full));
		int err = stat(full, &st) != 0 ? errno : (S_ISDIR(st.st_mode) ? 0 : ENOTDIR);
		if (err != 0) {
			slurm_error("pyxis: --container-workdir: couldn't chdir to %s: %s",
				    val[O_WORKDIR], strerror(err));
			rc = -1;
		}
	}
	if (rc == 0 && val[O_NAME] != NULL && *val[O_NAME] != '\0' && named_container(sp) != 0)
		rc = -1;
	step_refused = rc != 0;
	return 0;
}

/* append s to buf (at *pos) as a JSON string, or null */
static void json_str(char *buf, size_t len, size_t *pos, const char *s)
{
	if (s == NULL) {
		*pos += (size_t)snprintf(buf + *pos, *pos < len ? len - *pos : 0, "null");
		return;
	}
	if (*pos < len)
		buf[(*pos)++] = '"';
	for (; *s && *pos + 8 < len; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\') {
			buf[(*pos)++] = '\\';
			buf[(*pos)++] = (char)c;
		} else if (c < 0x20) {
			*pos += (size_t)snprintf(buf + *pos, len - *pos, "\\u%04x", c);
		} else {
			buf[(*pos)++] = (char)c;
		}
	}
	if (*pos < len)
		buf[(*pos)++] = '"';
}

static void record(spank_t sp)
{
	static const char *keys[N_OPTS] = {"image", "mounts", "name", "workdir", "env",
					    "writable", "mount_home", NULL};
	char path[PATH_MAX] = "", node[256] = "", cwd[PATH_MAX] = "", line[16384];
	uint32_t job = 0, step = 0, rank = 0;
	size_t pos = 0;
	int fd;
	if (spank_getenv(sp, "FAKE_PYXIS_RECORD", path, sizeof(path)) != ESPANK_SUCCESS ||
	    path[0] == '\0') {
		if (record_default == NULL)
			return;
		snprintf(path, sizeof(path), "%s", record_default);
	}
	spank_get_item(sp, S_JOB_ID, &job);
	spank_get_item(sp, S_JOB_STEPID, &step);
	spank_get_item(sp, S_TASK_GLOBAL_ID, &rank);
	if (spank_getenv(sp, "SLURMD_NODENAME", node, sizeof(node)) != ESPANK_SUCCESS)
		node[0] = '\0';
	if (getcwd(cwd, sizeof(cwd)) == NULL)
		cwd[0] = '\0';
	pos += (size_t)snprintf(line, sizeof(line), "{\"job\": %u, \"step\": ", job);
	if (step >= 0xfffffff0u) /* batch / extern / interactive steps */
		json_str(line, sizeof(line), &pos, step == 0xfffffffbu ? "batch" : "other");
	else
		pos += (size_t)snprintf(line + pos, sizeof(line) - pos, "%u", step);
	pos += (size_t)snprintf(line + pos, sizeof(line) - pos, ", \"rank\": %u, \"node\": ",
				rank);
	json_str(line, sizeof(line), &pos, node);
	pos += (size_t)snprintf(line + pos, sizeof(line) - pos, ", \"cwd\": ");
	json_str(line, sizeof(line), &pos, cwd);
	for (int i = 0; keys[i] != NULL; i++) {
		pos += (size_t)snprintf(line + pos, sizeof(line) - pos, ", \"%s\": ", keys[i]);
		json_str(line, sizeof(line), &pos, i == O_IMAGE && container[0] ? used_image : val[i]);
	}
	pos += (size_t)snprintf(line + pos, sizeof(line) - pos, ", \"container\": ");
	json_str(line, sizeof(line), &pos, container[0] ? container : NULL);
	pos += (size_t)snprintf(line + pos, sizeof(line) - pos, ", \"reused\": %s",
				reused ? "true" : "false");
	if (pos + 2 >= sizeof(line))
		pos = sizeof(line) - 2;
	line[pos++] = '}';
	line[pos++] = '\n';
	fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	if (fd < 0) {
		slurm_error("fake_pyxis: cannot open record file %s: %s", path, strerror(errno));
		return;
	}
	if (write(fd, line, pos) != (ssize_t)pos) /* one write: lines of parallel tasks stay whole */
		slurm_error("fake_pyxis: cannot write %s: %s", path, strerror(errno));
	close(fd);
}

int slurm_spank_task_init(spank_t sp, int ac, char **av)
{
	(void)ac;
	(void)av;
	for (int i = 0; env_name[i] != NULL; i++) {
		const char *v = i == O_IMAGE && container[0] ? used_image : val[i];
		if (v != NULL)
			spank_setenv(sp, env_name[i], v, 1);
		else
			spank_unsetenv(sp, env_name[i]);
	}
	if (container[0])
		spank_setenv(sp, "FAKE_PYXIS_CONTAINER", container, 1);
	else
		spank_unsetenv(sp, "FAKE_PYXIS_CONTAINER");
	if (!any_container_option())
		return 0;
	if (step_refused)
		return -1;
	if (val[O_WORKDIR] != NULL && *val[O_WORKDIR] != '\0') {
		if (chdir(val[O_WORKDIR]) != 0) {
			slurm_error("pyxis: --container-workdir: couldn't chdir to %s: %s",
				    val[O_WORKDIR], strerror(errno));
			return -1;
		}
		spank_setenv(sp, "PWD", val[O_WORKDIR], 1);
	}
	record(sp);
	return 0;
}
