// The Metal device probe: what the GPU of this Mac (or of a CI runner's virtual machine) is, and whether it runs
// the Metal features the backend's kernels rely on, each measured by a tiny kernel under a timeout.
//
//   xcrun -sdk macosx clang -fobjc-arc -O1 -framework Metal -framework Foundation \
//       tools/metal_device_probe.m -o metal_device_probe
//   ./metal_device_probe tools/metal_device_probe.json [--json OUT.json] [--markdown OUT.md]
//                        [--outputs FILE] [--timeout SECONDS]
//
// It records the device (name, architecture, supportsFamily for Apple7, Apple8, Apple9, Mac2 and the Metal3 and
// Metal4 common families where the SDK has them, the threadgroup limits, unified memory, the working-set size),
// then compiles the kernels of the table's `source` (metal_device_probe.metal, read at run time) with
// newLibraryWithSource and dispatches each on the grid the table gives, one at a time, waiting for each with a
// deadline: a kernel that does not finish in time is reported as a hang and nothing more is dispatched (a Metal
// command buffer cannot be withdrawn; later ones would queue behind it). Each kernel's output buffer starts as
// 0xFF bytes and must then hold the table's expected values exactly; test/emulator/test_metal_device_probe.py
// checks the same kernels against the same table on the emulator.
//
// Output: JSON (--json), Markdown (--markdown; stdout when neither is given), and, with --outputs, one
// `feature=verdict` line per feature of the table (GitHub step outputs) plus `device=true|false`. A verdict is
// `ok`, `wrong`, `hang`, `error` or `not-run`. The exit status is 0 whenever the report was written, whatever
// the device did (that is the report's content), and 2 for bad usage or an unreadable table or source.
#import <Foundation/Foundation.h>
#import <Metal/Metal.h>
#include <dispatch/dispatch.h>
#include <string.h>
#include <unistd.h>

static NSString *const kNotRun = @"not-run";

// Waits for `sem` until `seconds` from now; YES when it was signalled in time.
static BOOL WaitFor(dispatch_semaphore_t sem, double seconds) {
    return dispatch_semaphore_wait(sem, dispatch_time(DISPATCH_TIME_NOW, (int64_t)(seconds * NSEC_PER_SEC))) == 0;
}

static NSString *LanguageVersionName(MTLLanguageVersion v) {
    NSUInteger raw = (NSUInteger)v;  // major << 16 | minor
    return [NSString stringWithFormat:@"%lu.%lu", (unsigned long)(raw >> 16), (unsigned long)(raw & 0xFFFF)];
}

// supportsFamily for each family this SDK names; the Metal4 family exists from the macOS 26 SDK on.
static NSDictionary *Families(id<MTLDevice> device) {
    NSMutableDictionary *f = [NSMutableDictionary dictionary];
    f[@"apple7"] = @([device supportsFamily:MTLGPUFamilyApple7]);
    f[@"apple8"] = @([device supportsFamily:MTLGPUFamilyApple8]);
    f[@"apple9"] = @([device supportsFamily:MTLGPUFamilyApple9]);
    f[@"mac2"] = @([device supportsFamily:MTLGPUFamilyMac2]);
    f[@"metal3"] = @([device supportsFamily:MTLGPUFamilyMetal3]);
#if defined(__MAC_26_0) && __MAC_OS_X_VERSION_MAX_ALLOWED >= __MAC_26_0
    if (@available(macOS 26.0, *)) {
        f[@"metal4"] = @([device supportsFamily:MTLGPUFamilyMetal4]);
    }
#endif
    return f;
}

static NSDictionary *DeviceFacts(id<MTLDevice> device) {
    MTLSize maxThreads = device.maxThreadsPerThreadgroup;
    NSMutableDictionary *d = [NSMutableDictionary dictionary];
    d[@"name"] = device.name;
    if (@available(macOS 14.0, *)) {
        d[@"architecture"] = device.architecture.name;
    }
    d[@"families"] = Families(device);
    d[@"max_threads_per_threadgroup"] = @[ @(maxThreads.width), @(maxThreads.height), @(maxThreads.depth) ];
    d[@"max_threadgroup_memory_bytes"] = @(device.maxThreadgroupMemoryLength);
    d[@"unified_memory"] = @(device.hasUnifiedMemory);
    d[@"recommended_max_working_set_bytes"] = @(device.recommendedMaxWorkingSetSize);
    d[@"max_buffer_bytes"] = @(device.maxBufferLength);
    d[@"low_power"] = @(device.isLowPower);
    d[@"headless"] = @(device.isHeadless);
    d[@"registry_id"] = @(device.registryID);
    d[@"default_msl_version"] = LanguageVersionName([MTLCompileOptions new].languageVersion);
    return d;
}

// The library, compiled asynchronously so that a compiler that never answers is a timeout, not a hung probe.
static id<MTLLibrary> CompileLibrary(id<MTLDevice> device, NSString *source, double timeout, NSMutableDictionary *out) {
    __block id<MTLLibrary> library = nil;
    __block NSString *diagnostics = @"";
    dispatch_semaphore_t done = dispatch_semaphore_create(0);
    NSDate *start = [NSDate date];
    [device newLibraryWithSource:source
                         options:[MTLCompileOptions new]
               completionHandler:^(id<MTLLibrary> lib, NSError *error) {
                   library = lib;
                   if (error != nil) diagnostics = error.localizedDescription;  // warnings come here too
                   dispatch_semaphore_signal(done);
               }];
    if (!WaitFor(done, timeout)) {
        out[@"status"] = @"hang";
        out[@"detail"] = [NSString stringWithFormat:@"newLibraryWithSource did not finish within %.0f s", timeout];
        return nil;
    }
    out[@"seconds"] = @(-[start timeIntervalSinceNow]);
    out[@"diagnostics"] = diagnostics;
    out[@"status"] = library != nil ? @"ok" : @"error";
    if (library == nil) out[@"detail"] = @"newLibraryWithSource failed (diagnostics below)";
    return library;
}

static NSString *Format(double v, BOOL isFloat) {
    return isFloat ? [NSString stringWithFormat:@"%.9g", v] : [NSString stringWithFormat:@"%lld", (long long)v];
}

// Compares the output buffer with the table's outputs; nil when every value matches, else what differs (at most
// four values of each output).
static NSString *Mismatches(const void *contents, NSDictionary *kernel, BOOL isFloat) {
    NSMutableArray *lines = [NSMutableArray array];
    NSUInteger index = 0;
    for (NSDictionary *output in kernel[@"outputs"]) {
        NSArray *expected = output[@"expected"];
        NSMutableArray *bad = [NSMutableArray array];
        NSUInteger wrong = 0;
        for (NSUInteger i = 0; i < expected.count; ++i, ++index) {
            double want = [expected[i] doubleValue];
            double got = isFloat ? (double)((const float *)contents)[index] : (double)((const int32_t *)contents)[index];
            if (got == want) continue;  // NaN (an unwritten float) never equals
            if (++wrong <= 4) {
                [bad addObject:[NSString stringWithFormat:@"[%lu] %@ (expected %@)", (unsigned long)i,
                                                          Format(got, isFloat), Format(want, isFloat)]];
            }
        }
        if (wrong) {
            [lines addObject:[NSString stringWithFormat:@"%@: %lu of %lu wrong: %@", output[@"what"],
                                                        (unsigned long)wrong, (unsigned long)expected.count,
                                                        [bad componentsJoinedByString:@", "]]];
        }
    }
    return lines.count ? [lines componentsJoinedByString:@"; "] : nil;
}

// One kernel: pipeline, buffer of 0xFF bytes, dispatch, wait with a deadline, compare. Sets *hung when the kernel
// (or its pipeline) did not finish in time.
static NSDictionary *RunKernel(id<MTLDevice> device, id<MTLCommandQueue> queue, id<MTLLibrary> library,
                               NSDictionary *kernel, double timeout, BOOL *hung) {
    NSMutableDictionary *r = [NSMutableDictionary dictionary];
    NSString *name = kernel[@"name"];
    r[@"name"] = name;
    r[@"feature"] = kernel[@"feature"];
    NSMutableArray *checks = [NSMutableArray array];
    for (NSDictionary *o in kernel[@"outputs"]) [checks addObject:o[@"what"]];
    r[@"checks"] = checks;
    id<MTLFunction> function = [library newFunctionWithName:name];
    if (function == nil) {
        r[@"status"] = @"error";
        r[@"detail"] = [NSString stringWithFormat:@"the library has no kernel %@", name];
        return r;
    }
    __block id<MTLComputePipelineState> pipeline = nil;
    __block NSString *pipelineError = @"";
    dispatch_semaphore_t built = dispatch_semaphore_create(0);
    [device newComputePipelineStateWithFunction:function
                              completionHandler:^(id<MTLComputePipelineState> state, NSError *error) {
                                  pipeline = state;
                                  if (error != nil) pipelineError = error.localizedDescription;
                                  dispatch_semaphore_signal(built);
                              }];
    if (!WaitFor(built, timeout)) {
        *hung = YES;
        r[@"status"] = @"hang";
        r[@"detail"] = [NSString stringWithFormat:@"its pipeline was not built within %.0f s", timeout];
        return r;
    }
    if (pipeline == nil) {
        r[@"status"] = @"error";
        r[@"detail"] = [NSString stringWithFormat:@"pipeline: %@", pipelineError];
        return r;
    }
    r[@"thread_execution_width"] = @(pipeline.threadExecutionWidth);
    r[@"max_total_threads_per_threadgroup"] = @(pipeline.maxTotalThreadsPerThreadgroup);
    NSUInteger groups = [kernel[@"threadgroups"] unsignedIntegerValue];
    NSUInteger threads = [kernel[@"threads_per_threadgroup"] unsignedIntegerValue];
    if (threads > pipeline.maxTotalThreadsPerThreadgroup) {
        r[@"status"] = @"error";
        r[@"detail"] = [NSString stringWithFormat:@"needs %lu threads per threadgroup, the pipeline allows %lu",
                                                  (unsigned long)threads,
                                                  (unsigned long)pipeline.maxTotalThreadsPerThreadgroup];
        return r;
    }
    BOOL isFloat = [kernel[@"type"] isEqualToString:@"float32"];
    NSUInteger count = 0;
    for (NSDictionary *o in kernel[@"outputs"]) count += [o[@"expected"] count];
    id<MTLBuffer> buffer = [device newBufferWithLength:count * 4 options:MTLResourceStorageModeShared];
    memset(buffer.contents, 0xFF, count * 4);
    id<MTLCommandBuffer> commands = [queue commandBuffer];
    id<MTLComputeCommandEncoder> encoder = [commands computeCommandEncoder];
    [encoder setComputePipelineState:pipeline];
    [encoder setBuffer:buffer offset:0 atIndex:0];
    [encoder dispatchThreadgroups:MTLSizeMake(groups, 1, 1) threadsPerThreadgroup:MTLSizeMake(threads, 1, 1)];
    [encoder endEncoding];
    dispatch_semaphore_t finished = dispatch_semaphore_create(0);
    [commands addCompletedHandler:^(id<MTLCommandBuffer> cb) {
        dispatch_semaphore_signal(finished);
    }];
    NSDate *start = [NSDate date];
    [commands commit];
    if (!WaitFor(finished, timeout)) {
        *hung = YES;
        r[@"status"] = @"hang";
        r[@"detail"] = [NSString stringWithFormat:@"did not finish within %.0f s", timeout];
        return r;
    }
    r[@"seconds"] = @(-[start timeIntervalSinceNow]);
    if (commands.status != MTLCommandBufferStatusCompleted) {
        r[@"status"] = @"error";
        r[@"detail"] = [NSString stringWithFormat:@"command buffer status %ld: %@", (long)commands.status,
                                                  commands.error.localizedDescription ?: @"no error given"];
        return r;
    }
    r[@"gpu_seconds"] = @(commands.GPUEndTime - commands.GPUStartTime);
    NSString *wrong = Mismatches(buffer.contents, kernel, isFloat);
    r[@"status"] = wrong ? @"wrong" : @"ok";
    if (wrong) r[@"detail"] = wrong;
    return r;
}

// A feature's verdict: ok when each of its kernels is; else the first other status among them.
static NSDictionary *Verdicts(NSArray *tableKernels, NSArray *results) {
    NSMutableDictionary *v = [NSMutableDictionary dictionary];
    for (NSDictionary *k in tableKernels) {
        if (v[k[@"feature"]] == nil) v[k[@"feature"]] = @"ok";
    }
    for (NSDictionary *r in results) {
        if ([v[r[@"feature"]] isEqualToString:@"ok"] && ![r[@"status"] isEqualToString:@"ok"]) {
            v[r[@"feature"]] = r[@"status"];
        }
    }
    return v;
}

static NSString *Cell(id value) {
    NSString *s = [value description];
    s = [s stringByReplacingOccurrencesOfString:@"|" withString:@"\\|"];
    return [s stringByReplacingOccurrencesOfString:@"\n" withString:@" "];
}

static NSString *Markdown(NSDictionary *report) {
    NSMutableString *m = [NSMutableString stringWithString:@"## Metal device probe\n\n"];
    [m appendFormat:@"%@\n\n", report[@"os"]];
    NSDictionary *device = report[@"device"];
    if (device == nil) {
        [m appendFormat:@"**No Metal device:** %@\n", report[@"detail"]];
        return m;
    }
    [m appendString:@"| device | |\n|---|---|\n"];
    for (NSString *key in [[device allKeys] sortedArrayUsingSelector:@selector(compare:)]) {
        id value = device[key];
        if ([value isKindOfClass:[NSDictionary class]]) {
            NSMutableArray *parts = [NSMutableArray array];
            for (NSString *k in [[value allKeys] sortedArrayUsingSelector:@selector(compare:)]) {
                [parts addObject:[NSString stringWithFormat:@"%@ %@", k, [value[k] boolValue] ? @"yes" : @"no"]];
            }
            value = [parts componentsJoinedByString:@", "];
        } else if ([value isKindOfClass:[NSArray class]]) {
            value = [value componentsJoinedByString:@" x "];
        }
        [m appendFormat:@"| %@ | %@ |\n", key, Cell(value)];
    }
    NSDictionary *library = report[@"library"];
    [m appendFormat:@"\nKernels (%@): library %@", report[@"source"], library[@"status"]];
    if (library[@"detail"]) [m appendFormat:@" — %@", Cell(library[@"detail"])];
    if ([library[@"diagnostics"] length]) [m appendFormat:@"\n\n```\n%@\n```", library[@"diagnostics"]];
    [m appendString:@"\n\n| kernel | feature | result | checks | detail |\n|---|---|---|---|---|\n"];
    for (NSDictionary *r in report[@"kernels"]) {
        NSString *width = r[@"thread_execution_width"] ? [NSString stringWithFormat:@"SIMD width %@; ",
                                                                              r[@"thread_execution_width"]] : @"";
        [m appendFormat:@"| `%@` | %@ | **%@** | %@ | %@%@ |\n", r[@"name"], r[@"feature"], r[@"status"],
                        Cell([r[@"checks"] componentsJoinedByString:@"; "]), width, Cell(r[@"detail"] ?: @"")];
    }
    [m appendString:@"\n| feature | verdict |\n|---|---|\n"];
    NSDictionary *verdicts = report[@"verdicts"];
    for (NSString *f in [[verdicts allKeys] sortedArrayUsingSelector:@selector(compare:)]) {
        [m appendFormat:@"| %@ | **%@** |\n", f, verdicts[f]];
    }
    return m;
}

static BOOL Write(NSString *path, NSData *data) {
    NSError *error = nil;
    if (![data writeToFile:path options:NSDataWritingAtomic error:&error]) {
        fprintf(stderr, "metal_device_probe: cannot write %s: %s\n", path.UTF8String,
                error.localizedDescription.UTF8String);
        return NO;
    }
    return YES;
}

static int Usage(const char *why) {
    fprintf(stderr, "metal_device_probe: %s\nusage: metal_device_probe TABLE.json [--json OUT] [--markdown OUT] "
                    "[--outputs FILE] [--timeout SECONDS]\n", why);
    return 2;
}

int main(int argc, const char *argv[]) {
    @autoreleasepool {
        NSString *tablePath = nil, *jsonPath = nil, *markdownPath = nil, *outputsPath = nil;
        double timeout = 20.0;
        for (int i = 1; i < argc; ++i) {
            NSString *arg = @(argv[i]);
            BOOL hasValue = i + 1 < argc;
            if ([arg isEqualToString:@"--json"] && hasValue) jsonPath = @(argv[++i]);
            else if ([arg isEqualToString:@"--markdown"] && hasValue) markdownPath = @(argv[++i]);
            else if ([arg isEqualToString:@"--outputs"] && hasValue) outputsPath = @(argv[++i]);
            else if ([arg isEqualToString:@"--timeout"] && hasValue) timeout = atof(argv[++i]);
            else if (![arg hasPrefix:@"--"] && tablePath == nil) tablePath = arg;
            else return Usage([[NSString stringWithFormat:@"unexpected argument %@", arg] UTF8String]);
        }
        if (tablePath == nil) return Usage("no table given");
        if (!(timeout > 0)) return Usage("--timeout must be a positive number of seconds");
        NSError *error = nil;
        NSData *tableData = [NSData dataWithContentsOfFile:tablePath options:0 error:&error];
        NSDictionary *table = tableData ? [NSJSONSerialization JSONObjectWithData:tableData options:0 error:&error] : nil;
        if (![table isKindOfClass:[NSDictionary class]] || ![table[@"kernels"] isKindOfClass:[NSArray class]]) {
            return Usage([[NSString stringWithFormat:@"cannot read the table %@: %@", tablePath,
                                                     error.localizedDescription ?: @"no `kernels` list"] UTF8String]);
        }
        NSString *sourcePath = [[tablePath stringByDeletingLastPathComponent] stringByAppendingPathComponent:table[@"source"]];
        NSString *source = [NSString stringWithContentsOfFile:sourcePath encoding:NSUTF8StringEncoding error:&error];
        if (source == nil) {
            return Usage([[NSString stringWithFormat:@"cannot read the kernels %@: %@", sourcePath,
                                                     error.localizedDescription] UTF8String]);
        }

        NSMutableDictionary *report = [NSMutableDictionary dictionary];
        report[@"tool"] = @"tools/metal_device_probe.m";
        report[@"os"] = [NSProcessInfo processInfo].operatingSystemVersionString;
        report[@"source"] = table[@"source"];
        report[@"timeout_seconds"] = @(timeout);
        id<MTLDevice> device = MTLCreateSystemDefaultDevice();
        if (device == nil) {  // headless processes may get no default device, yet see one in the list
            NSArray<id<MTLDevice>> *all = MTLCopyAllDevices();
            device = all.firstObject;
        }
        NSMutableArray *results = [NSMutableArray array];
        if (device == nil) {
            report[@"detail"] = @"MTLCreateSystemDefaultDevice() and MTLCopyAllDevices() found no Metal device";
        } else {
            report[@"device"] = DeviceFacts(device);
            NSMutableDictionary *libraryReport = [NSMutableDictionary dictionary];
            id<MTLLibrary> library = CompileLibrary(device, source, timeout, libraryReport);
            report[@"library"] = libraryReport;
            id<MTLCommandQueue> queue = [device newCommandQueue];
            BOOL hung = [libraryReport[@"status"] isEqualToString:@"hang"];
            for (NSDictionary *kernel in table[@"kernels"]) {
                if (library == nil || hung) {
                    NSString *why = hung ? @"an earlier kernel or compile hung" : @"the library did not compile";
                    [results addObject:@{@"name" : kernel[@"name"], @"feature" : kernel[@"feature"], @"status" : kNotRun,
                                         @"checks" : @[], @"detail" : why}];
                    continue;
                }
                [results addObject:RunKernel(device, queue, library, kernel, timeout, &hung)];
            }
        }
        report[@"kernels"] = results;
        NSMutableDictionary *verdicts = [Verdicts(table[@"kernels"], results) mutableCopy];
        if (device == nil) {
            for (NSString *f in verdicts.allKeys) verdicts[f] = kNotRun;
        }
        report[@"verdicts"] = verdicts;

        BOOL ok = YES;
        NSString *markdown = Markdown(report);
        if (jsonPath) {
            NSData *json = [NSJSONSerialization dataWithJSONObject:report
                                                           options:NSJSONWritingPrettyPrinted | NSJSONWritingSortedKeys
                                                             error:&error];
            ok = json != nil && Write(jsonPath, json) && ok;
        }
        if (markdownPath) ok = Write(markdownPath, [markdown dataUsingEncoding:NSUTF8StringEncoding]) && ok;
        if (!jsonPath && !markdownPath) printf("%s", markdown.UTF8String);
        if (outputsPath) {
            NSMutableString *lines = [NSMutableString stringWithFormat:@"device=%@\n", device ? @"true" : @"false"];
            for (NSString *f in [[verdicts allKeys] sortedArrayUsingSelector:@selector(compare:)]) {
                [lines appendFormat:@"%@=%@\n", f, verdicts[f]];
            }
            NSFileHandle *h = [NSFileHandle fileHandleForWritingAtPath:outputsPath];
            if (h == nil) {
                ok = [[NSFileManager defaultManager] createFileAtPath:outputsPath
                                                             contents:[lines dataUsingEncoding:NSUTF8StringEncoding]
                                                           attributes:nil] && ok;
            } else {  // GitHub's output file: append
                [h seekToEndOfFile];
                [h writeData:[lines dataUsingEncoding:NSUTF8StringEncoding]];
                [h closeFile];
            }
        }
        fflush(stdout);
        // _exit, not return: after a hang a command buffer is still in flight, and Metal's teardown could wait for it.
        _exit(ok ? 0 : 2);
    }
}
