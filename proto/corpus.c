/* Memory-mapped corpora: the trainer reads random windows all over the
 * file, and the page cache shares the bytes between the block processes
 * of one host. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "proto/corpus.h"
#include "kernels/error.h"

int
corpus_open(corpus *c, const char *path, const char *expect_sha256,
    size_t min_len, char *err)
{
	struct stat st;
	int fd;

	memset(c, 0, sizeof(*c));
	if (path == NULL || path[0] == '\0')
		return kn_error(err, KN_EINVAL, "no data file given in the "
		    "spec's [data] section");
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return kn_error(err, KN_EIO, "cannot open %s: %s", path,
		    strerror(errno));
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return kn_error(err, KN_EIO, "%s is not a regular file", path);
	}
	if ((size_t)st.st_size < min_len) {
		close(fd);
		return kn_error(err, KN_EINVAL, "%s has %lld bytes; the window "
		    "needs at least %zu", path, (long long)st.st_size, min_len);
	}
	c->map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
	close(fd);
	if (c->map == MAP_FAILED) {
		c->map = NULL;
		return kn_error(err, KN_EIO, "cannot map %s: %s", path,
		    strerror(errno));
	}
	c->map_len = (size_t)st.st_size;
	c->data = c->map;
	c->len = c->map_len;
	if (expect_sha256 != NULL && expect_sha256[0] != '\0') {
		unsigned char md[32];
		unsigned int mdlen;
		char hex[65];
		int i;

		EVP_Digest(c->data, c->len, md, &mdlen, EVP_sha256(), NULL);
		for (i = 0; i < 32; i++)
			snprintf(hex + 2 * i, 3, "%02x", md[i]);
		if (strcmp(hex, expect_sha256) != 0) {
			corpus_close(c);
			return kn_error(err, KN_EINVAL, "%s has sha256 %.16s..., "
			    "the spec expects %.16s...: wrong or changed file",
			    path, hex, expect_sha256);
		}
	}
	return KN_OK;
}

void
corpus_close(corpus *c)
{
	if (c->map != NULL)
		munmap(c->map, c->map_len);
	memset(c, 0, sizeof(*c));
}
